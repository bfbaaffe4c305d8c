module github.com/gpubill/gpubill/migrations

go 1.26
