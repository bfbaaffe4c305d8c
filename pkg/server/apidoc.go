package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	gpubillproto "github.com/gpubill/gpubill/proto"
)

// The API's description, on every gateway: the OpenAPI v2 document
// generated from the protos (proto/gen/openapiv2), cut to the services this
// server registers, and a page rendering it. The page is made here from the
// document (no script, nothing fetched), so it works offline.
const (
	OpenAPIPath = "/v1/openapi.json"
	DocsPath    = "/docs"
)

// openAPIDoc is the part of a Swagger 2.0 document that the docs page reads;
// the JSON served is the generated document itself, filtered (apiDocs).
type openAPIDoc struct {
	Info        struct{ Title, Description, Version string }
	Tags        []struct{ Name, Description string }
	Paths       map[string]map[string]operation
	Definitions map[string]schema
}

type operation struct {
	Summary     string      `json:"summary"`
	Description string      `json:"description"`
	OperationID string      `json:"operationId"`
	Tags        []string    `json:"tags"`
	Parameters  []parameter `json:"parameters"`
	Responses   map[string]struct {
		Description string  `json:"description"`
		Schema      *schema `json:"schema"`
	} `json:"responses"`
}

type parameter struct {
	Name        string   `json:"name"`
	In          string   `json:"in"`
	Description string   `json:"description"`
	Required    bool     `json:"required"`
	Type        string   `json:"type"`
	Format      string   `json:"format"`
	Items       *schema  `json:"items"`
	Enum        []string `json:"enum"`
	Schema      *schema  `json:"schema"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Title                string             `json:"title"`
	Description          string             `json:"description"`
	Items                *schema            `json:"items"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"` // a schema, or a bool
	Properties           map[string]*schema `json:"properties"`
	Enum                 []any              `json:"enum"`
	Default              any                `json:"default"`
	Required             []string           `json:"required"`
}

// apiDocs returns the OpenAPI document (JSON) and the docs page (HTML) for
// a server that registers the gRPC services named (full names); with none
// named, the whole document.
func apiDocs(services []string, version string) (spec, page []byte, err error) {
	var raw map[string]any
	if err := json.Unmarshal(gpubillproto.OpenAPIv2, &raw); err != nil {
		return nil, nil, fmt.Errorf("openapi document: %w", err)
	}
	if len(services) > 0 {
		filterServices(raw, services)
	}
	if version == "" {
		version = "dev"
	}
	raw["info"] = map[string]any{
		"title":   "gpubill API",
		"version": version,
		"description": "Billing and settlement for a GPU marketplace. Every call but /healthz, /readyz, /metrics and these docs " +
			"needs `Authorization: Bearer <token>` (HS256, audience gpubill-api; `gpubill token` makes one). " +
			"JSON field names are the proto field names; an error is a google.rpc.Status with the request id as a RequestInfo detail.",
	}
	raw["securityDefinitions"] = map[string]any{"bearer": map[string]any{"type": "apiKey", "name": "Authorization", "in": "header"}}
	raw["security"] = []any{map[string]any{"bearer": []any{}}}
	if spec, err = json.MarshalIndent(raw, "", "  "); err != nil {
		return nil, nil, err
	}
	var doc openAPIDoc
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, nil, fmt.Errorf("openapi document: %w", err)
	}
	var buf bytes.Buffer
	if err := docsPage.Execute(&buf, newDocsView(doc)); err != nil {
		return nil, nil, fmt.Errorf("docs page: %w", err)
	}
	return spec, buf.Bytes(), nil
}

// filterServices keeps the operations, tags and definitions of the named
// services (an operation's tag is its service's short name, as
// protoc-gen-openapiv2 writes it).
func filterServices(raw map[string]any, services []string) {
	keep := map[string]bool{}
	for _, s := range services {
		keep[s[strings.LastIndex(s, ".")+1:]] = true
	}
	paths, _ := raw["paths"].(map[string]any)
	for p, item := range paths {
		ops, _ := item.(map[string]any)
		for m, op := range ops {
			tags, _ := op.(map[string]any)["tags"].([]any)
			if len(tags) == 0 || !keep[fmt.Sprint(tags[0])] {
				delete(ops, m)
			}
		}
		if len(ops) == 0 {
			delete(paths, p)
		}
	}
	if tags, ok := raw["tags"].([]any); ok {
		raw["tags"] = slices.DeleteFunc(tags, func(t any) bool {
			m, _ := t.(map[string]any)
			return !keep[fmt.Sprint(m["name"])]
		})
	}
	// Definitions: only those the kept operations reach.
	defs, _ := raw["definitions"].(map[string]any)
	reached := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" {
					name := strings.TrimPrefix(s, "#/definitions/")
					if !reached[name] {
						reached[name] = true
						walk(defs[name])
					}
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(paths)
	for name := range defs {
		if !reached[name] {
			delete(defs, name)
		}
	}
}

// serveAPIDocs adds the document and the page to mux.
func serveAPIDocs(mux *http.ServeMux, spec, page []byte) {
	mux.HandleFunc("GET "+OpenAPIPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(spec)
	})
	mux.HandleFunc("GET "+DocsPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// The page needs nothing from anywhere: no script, no remote style.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	})
}

// The page's model: services (tags) in the document's order, each with its
// operations sorted by path then method, then every definition.
type docsView struct {
	Info     struct{ Title, Description, Version string }
	SpecPath string
	Services []docsService
	Defs     []docsDef
}

type docsService struct {
	Name, Description string
	Ops               []docsOp
}

type docsOp struct {
	ID, Method, Path, Summary, Description string
	Params                                 []docsField
	Body                                   template.HTML // the request body's type, if any
	Response                               template.HTML
}

type docsField struct {
	Name, In, Description string
	Type                  template.HTML
	Required              bool
}

type docsDef struct {
	Name, Title, Description string
	Type                     template.HTML // for a definition without properties (an enum)
	Fields                   []docsField
}

func newDocsView(d openAPIDoc) docsView {
	v := docsView{Info: d.Info, SpecPath: OpenAPIPath}
	opsByTag := map[string][]docsOp{}
	for path, ops := range d.Paths {
		for method, op := range ops {
			tag := "Other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			opsByTag[tag] = append(opsByTag[tag], newDocsOp(path, method, op))
		}
	}
	add := func(name, desc string) {
		ops := opsByTag[name]
		if len(ops) == 0 {
			return
		}
		delete(opsByTag, name)
		slices.SortFunc(ops, func(a, b docsOp) int {
			if c := strings.Compare(a.Path, b.Path); c != 0 {
				return c
			}
			return strings.Compare(a.Method, b.Method)
		})
		v.Services = append(v.Services, docsService{Name: name, Description: desc, Ops: ops})
	}
	for _, t := range d.Tags {
		add(t.Name, t.Description)
	}
	for _, t := range slices.Sorted(maps.Keys(opsByTag)) { // operations of an undeclared tag
		add(t, "")
	}
	names := make([]string, 0, len(d.Definitions))
	for n := range d.Definitions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v.Defs = append(v.Defs, newDocsDef(n, d.Definitions[n]))
	}
	return v
}

// newDocsOp is the page's entry for one operation: its parameters, request
// body and answer.
func newDocsOp(path, method string, op operation) docsOp {
	o := docsOp{ID: op.OperationID, Method: strings.ToUpper(method), Path: path, Summary: op.Summary, Description: op.Description}
	for _, p := range op.Parameters {
		if p.In == "body" {
			o.Body = typeHTML(p.Schema)
			continue
		}
		t := &schema{Type: p.Type, Format: p.Format, Items: p.Items}
		for _, e := range p.Enum {
			t.Enum = append(t.Enum, e)
		}
		o.Params = append(o.Params, docsField{Name: p.Name, In: p.In, Description: p.Description, Type: typeHTML(t), Required: p.Required})
	}
	if r, ok := op.Responses["200"]; ok {
		o.Response = typeHTML(r.Schema)
	}
	return o
}

// newDocsDef is the page's entry for one definition: its fields by name, or
// its type when it has none (an enum).
func newDocsDef(n string, s schema) docsDef {
	def := docsDef{Name: n, Title: s.Title, Description: s.Description}
	props := make([]string, 0, len(s.Properties))
	for p := range s.Properties {
		props = append(props, p)
	}
	sort.Strings(props)
	for _, p := range props {
		ps := s.Properties[p]
		desc := ps.Title
		if ps.Description != "" {
			desc = strings.TrimSpace(desc + "\n" + ps.Description)
		}
		def.Fields = append(def.Fields, docsField{Name: p, Description: desc, Type: typeHTML(ps), Required: slices.Contains(s.Required, p)})
	}
	if len(props) == 0 {
		def.Type = typeHTML(&s)
	}
	return def
}

// typeHTML writes a schema's type: a link to its definition, "array of …",
// "map of string to …", a primitive type with its format, enum values.
func typeHTML(s *schema) template.HTML {
	if s == nil {
		return ""
	}
	esc := template.HTMLEscapeString
	switch {
	case s.Ref != "":
		name := strings.TrimPrefix(s.Ref, "#/definitions/")
		return template.HTML(fmt.Sprintf(`<a href="#def-%s">%s</a>`, esc(name), esc(name)))
	case s.Type == "array":
		return "array of " + typeHTML(s.Items)
	case len(s.AdditionalProperties) > 0 && s.AdditionalProperties[0] == '{':
		var v schema
		if json.Unmarshal(s.AdditionalProperties, &v) == nil && (v.Ref != "" || v.Type != "") {
			return "map of string to " + typeHTML(&v)
		}
	}
	t := s.Type
	if t == "" {
		t = "object"
	}
	if s.Format != "" {
		t += " (" + s.Format + ")"
	}
	out := esc(t)
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			vals[i] = "<code>" + esc(fmt.Sprint(e)) + "</code>"
		}
		out += ": one of " + strings.Join(vals, ", ")
	}
	return template.HTML(out)
}

var docsPage = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Info.Title}} {{.Info.Version}}</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:72rem;margin:0 auto;padding:1rem 2rem;color:#1b1f24}
code,.path{font-family:ui-monospace,monospace;font-size:.93em}
h2{border-bottom:1px solid #ccd;padding-bottom:.2rem;margin-top:2.5rem}
h3{font-size:1.05rem;margin:1.6rem 0 .3rem}
.m{display:inline-block;min-width:4.2rem;padding:.05rem .4rem;border-radius:3px;color:#fff;font-size:.8rem;text-align:center;margin-right:.4rem}
.GET{background:#1f6feb}.POST{background:#1a7f37}.PUT{background:#9a6700}.PATCH{background:#8250df}.DELETE{background:#cf222e}
.d{white-space:pre-wrap;margin:.2rem 0 .5rem}
table{border-collapse:collapse;margin:.3rem 0 .8rem}td,th{border:1px solid #d0d7de;padding:.2rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.d{margin:0}nav li{margin:.1rem 0}.muted{color:#57606a}
</style></head><body>
<h1>{{.Info.Title}} <span class="muted">{{.Info.Version}}</span></h1>
<p class="d">{{.Info.Description}}</p>
<p>Machine-readable: <a href="{{.SpecPath}}">{{.SpecPath}}</a> (OpenAPI 2.0, generated from the protos).</p>
<nav><h2>Services</h2><ul>
{{range .Services}}<li><a href="#svc-{{.Name}}">{{.Name}}</a><ul>
{{range .Ops}}<li><a href="#op-{{.ID}}"><span class="path">{{.Method}} {{.Path}}</span></a> <span class="muted">{{.Summary}}</span></li>
{{end}}</ul></li>
{{end}}</ul></nav>
{{range .Services}}<h2 id="svc-{{.Name}}">{{.Name}}</h2>
<p class="d">{{.Description}}</p>
{{range .Ops}}<h3 id="op-{{.ID}}"><span class="m {{.Method}}">{{.Method}}</span><span class="path">{{.Path}}</span></h3>
{{if .Summary}}<p class="d">{{.Summary}}</p>{{end}}{{if .Description}}<p class="d">{{.Description}}</p>{{end}}
{{if .Params}}<table><tr><th>parameter</th><th>in</th><th>type</th><th>description</th></tr>
{{range .Params}}<tr><td><code>{{.Name}}</code>{{if .Required}} *{{end}}</td><td>{{.In}}</td><td>{{.Type}}</td><td class="d">{{.Description}}</td></tr>
{{end}}</table>{{end}}
{{if .Body}}<p>Request body: {{.Body}}</p>{{end}}
{{if .Response}}<p>Response: {{.Response}}</p>{{end}}
{{end}}{{end}}
<h2 id="definitions">Definitions</h2>
{{range .Defs}}<h3 id="def-{{.Name}}">{{.Name}}</h3>
{{if .Title}}<p class="d">{{.Title}}</p>{{end}}{{if .Description}}<p class="d">{{.Description}}</p>{{end}}
{{if .Fields}}<table><tr><th>field</th><th>type</th><th>description</th></tr>
{{range .Fields}}<tr><td><code>{{.Name}}</code>{{if .Required}} *{{end}}</td><td>{{.Type}}</td><td class="d">{{.Description}}</td></tr>
{{end}}</table>{{else if .Type}}<p>{{.Type}}</p>{{end}}
{{end}}
</body></html>
`))
