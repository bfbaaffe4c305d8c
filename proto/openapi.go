// Package proto embeds the OpenAPI v2 document `make generate` writes from
// the protos (gen/openapiv2/gpubill.swagger.json: every service, merged;
// see buf.gen.yaml). pkg/server serves it at /v1/openapi.json and renders
// it at /docs; package apispec lists the google.api.http rules it was made
// from.
package proto

import _ "embed"

// OpenAPIv2 is the merged OpenAPI (Swagger 2.0) document of every service.
//
//go:embed gen/openapiv2/gpubill.swagger.json
var OpenAPIv2 []byte
