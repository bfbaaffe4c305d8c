module github.com/gpubill/gpubill/proto

go 1.26
