// Package httprules lists the REST routes the protos declare: every
// google.api.http rule (and additional binding) of every gpubill RPC, read
// from the compiled descriptors, so a check of the OpenAPI document or of a
// reverse proxy's routes never relies on a hand-kept list.
package httprules

import (
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Every package with a service, so its descriptors are registered.
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/ops/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/pricing/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/settlement/v1"
	_ "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// Rule is one REST route: an HTTP method and a path template as written in
// the proto ("/v1/providers/{provider.provider_id}"), and the RPC it reaches.
type Rule struct {
	Method  string // GET, POST, PUT, PATCH, DELETE, or a custom rule's kind
	Path    string
	Service string // full name: gpubill.ledger.v1.LedgerService
	RPC     string // method name: GetAccount
}

// All returns every rule of every gpubill service, sorted by path then method.
func All() []Rule {
	var out []Rule
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "gpubill.") {
			return true
		}
		svcs := fd.Services()
		for i := range svcs.Len() {
			sd := svcs.Get(i)
			ms := sd.Methods()
			for j := range ms.Len() {
				md := ms.Get(j)
				rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
				if !ok || rule == nil {
					continue
				}
				for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
					if m, p := methodPath(r); p != "" {
						out = append(out, Rule{Method: m, Path: p, Service: string(sd.FullName()), RPC: string(md.Name())})
					}
				}
			}
		}
		return true
	})
	slices.SortFunc(out, func(a, b Rule) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

func methodPath(r *annotations.HttpRule) (string, string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return "GET", p.Get
	case *annotations.HttpRule_Post:
		return "POST", p.Post
	case *annotations.HttpRule_Put:
		return "PUT", p.Put
	case *annotations.HttpRule_Patch:
		return "PATCH", p.Patch
	case *annotations.HttpRule_Delete:
		return "DELETE", p.Delete
	case *annotations.HttpRule_Custom:
		return strings.ToUpper(p.Custom.GetKind()), p.Custom.GetPath()
	}
	return "", ""
}
