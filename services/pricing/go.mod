module github.com/gpubill/gpubill/services/pricing

go 1.26

require (
	github.com/gpubill/gpubill/pkg v0.0.0
	github.com/gpubill/gpubill/proto v0.0.0
)

replace (
	github.com/gpubill/gpubill/pkg => ../../pkg
	github.com/gpubill/gpubill/proto => ../../proto
)
