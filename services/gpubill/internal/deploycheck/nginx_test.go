package deploycheck

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// An emulation of what nginx does with deploy/nginx.conf, enough for the
// directives it uses: upstream, map on a request argument, server with
// location (=, ^~, ~, prefix), proxy_pass (an upstream, with or without a
// URI, or a variable), return, and `if ($var = "") { return …; }`. Location
// selection follows nginx's documentation: an exact match wins; else the
// longest prefix is remembered; ^~ on it stops the search; else the regex
// locations are tried in the order written and the first match wins; else
// the longest prefix.

type directive struct {
	name  string
	args  []string
	block []directive // nil unless it had one
}

func tokenize(src string) ([]string, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case unicode.IsSpace(rune(c)):
			i++
		case c == '{' || c == '}' || c == ';':
			toks = append(toks, string(c))
			i++
		case c == '\'' || c == '"':
			j := strings.IndexByte(src[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote at byte %d", i)
			}
			toks = append(toks, src[i+1:i+1+j])
			i += j + 2
		default:
			j := i
			for j < len(src) && !unicode.IsSpace(rune(src[j])) && !strings.ContainsRune("{};", rune(src[j])) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		}
	}
	return toks, nil
}

func parseBlock(toks []string, i int) ([]directive, int, error) {
	var out []directive
	for i < len(toks) {
		if toks[i] == "}" {
			return out, i + 1, nil
		}
		d := directive{name: toks[i]}
		i++
		for i < len(toks) && toks[i] != ";" && toks[i] != "{" && toks[i] != "}" {
			d.args = append(d.args, toks[i])
			i++
		}
		if i == len(toks) {
			return nil, i, fmt.Errorf("%s: unterminated", d.name)
		}
		switch toks[i] {
		case ";":
			i++
		case "{":
			var err error
			if d.block, i, err = parseBlock(toks, i+1); err != nil {
				return nil, i, err
			}
			if d.block == nil {
				d.block = []directive{}
			}
		default:
			return nil, i, fmt.Errorf("%s: unexpected }", d.name)
		}
		out = append(out, d)
	}
	return out, i, nil
}

type location struct {
	modifier, pattern string // modifier: "", "=", "^~", "~"
	re                *regexp.Regexp
	body              []directive
}

type gateway struct {
	upstreams map[string][]string          // name → server addresses
	maps      map[string]map[string]string // $var → key → value ("default" too)
	mapSource map[string]string            // $var → its source ($arg_x)
	locations []location
	server    []directive // the server block's own directives (locations too)
}

func loadGateway(t *testing.T, path string) *gateway {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokenize(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	top, _, err := parseBlock(toks, 0)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	g := &gateway{upstreams: map[string][]string{}, maps: map[string]map[string]string{}, mapSource: map[string]string{}}
	var servers int
	for _, d := range top {
		if d.name != "http" {
			continue
		}
		for _, h := range d.block {
			switch h.name {
			case "upstream":
				for _, s := range h.block {
					if s.name == "server" {
						g.upstreams[h.args[0]] = append(g.upstreams[h.args[0]], s.args[0])
					}
				}
			case "map":
				m := map[string]string{}
				for _, e := range h.block {
					m[e.name] = strings.Join(e.args, " ")
				}
				g.maps[h.args[1]], g.mapSource[h.args[1]] = m, h.args[0]
			case "server":
				servers++
				g.server = h.block
				for _, l := range h.block {
					if l.name != "location" {
						continue
					}
					loc := location{body: l.block}
					switch len(l.args) {
					case 1:
						loc.pattern = l.args[0]
					case 2:
						loc.modifier, loc.pattern = l.args[0], l.args[1]
					default:
						t.Fatalf("location %v", l.args)
					}
					switch loc.modifier {
					case "", "=", "^~":
					case "~":
						loc.re = regexp.MustCompile(loc.pattern)
					default:
						t.Fatalf("location modifier %q: the emulation does not know it", loc.modifier)
					}
					g.locations = append(g.locations, loc)
				}
			}
		}
	}
	if servers != 1 || len(g.locations) == 0 || len(g.upstreams) == 0 {
		t.Fatalf("%s: %d server blocks, %d locations, %d upstreams", path, servers, len(g.locations), len(g.upstreams))
	}
	return g
}

// outcome is what the gateway does with a request.
type outcome struct {
	upstream string // proxied to this upstream…
	uri      string // …with this URI (the request's when proxy_pass names no URI)
	status   int    // or answered by nginx itself
}

func (o outcome) String() string {
	if o.upstream != "" {
		return "→ " + o.upstream + " " + o.uri
	}
	return fmt.Sprintf("answered %d", o.status)
}

func (g *gateway) selectLocation(path string) *location {
	var prefix *location
	for i := range g.locations {
		l := &g.locations[i]
		switch l.modifier {
		case "=":
			if path == l.pattern {
				return l
			}
		case "", "^~":
			if strings.HasPrefix(path, l.pattern) && (prefix == nil || len(l.pattern) > len(prefix.pattern)) {
				prefix = l
			}
		}
	}
	if prefix != nil && prefix.modifier == "^~" {
		return prefix
	}
	for i := range g.locations {
		if l := &g.locations[i]; l.re != nil && l.re.MatchString(path) {
			return l
		}
	}
	return prefix
}

func (g *gateway) variable(name string, query url.Values) (string, error) {
	if arg, ok := strings.CutPrefix(name, "$arg_"); ok {
		return query.Get(arg), nil
	}
	m, ok := g.maps[name]
	if !ok {
		return "", fmt.Errorf("variable %s: neither $arg_ nor a map", name)
	}
	src, err := g.variable(g.mapSource[name], query)
	if err != nil {
		return "", err
	}
	if v, ok := m[src]; ok {
		return v, nil
	}
	return m["default"], nil
}

func (g *gateway) route(target string) (outcome, error) {
	u, err := url.Parse(target)
	if err != nil {
		return outcome{}, err
	}
	l := g.selectLocation(u.Path)
	if l == nil {
		return outcome{}, fmt.Errorf("no location matches %s", u.Path)
	}
	return g.run(l.body, u)
}

func (g *gateway) run(body []directive, u *url.URL) (outcome, error) {
	for _, d := range body {
		switch d.name {
		case "return":
			var code int
			if _, err := fmt.Sscan(d.args[0], &code); err != nil {
				return outcome{}, fmt.Errorf("return %v", d.args)
			}
			return outcome{status: code}, nil
		case "if":
			// Only `if ($var = "")`, the one form deploy/nginx.conf uses.
			if len(d.args) != 4 || !strings.HasPrefix(d.args[0], "($") || d.args[1] != "=" || d.args[2] != "" || d.args[3] != ")" {
				return outcome{}, fmt.Errorf("if %v: the emulation knows only ($var = \"\")", d.args)
			}
			v, err := g.variable(strings.TrimPrefix(d.args[0], "("), u.Query())
			if err != nil {
				return outcome{}, err
			}
			if v == "" {
				return g.run(d.block, u)
			}
		case "proxy_pass":
			rest, ok := strings.CutPrefix(d.args[0], "http://")
			if !ok {
				return outcome{}, fmt.Errorf("proxy_pass %s", d.args[0])
			}
			host, uri, hasURI := strings.Cut(rest, "/")
			if strings.HasPrefix(host, "$") {
				v, err := g.variable(host, u.Query())
				if err != nil {
					return outcome{}, err
				}
				host = v
			}
			if _, ok := g.upstreams[host]; !ok {
				return outcome{}, fmt.Errorf("proxy_pass to %q, no upstream of that name", host)
			}
			out := outcome{upstream: host, uri: u.RequestURI()}
			if hasURI { // only used on exact locations: the URI replaces the path
				out.uri = "/" + uri
			}
			return out, nil
		}
	}
	return outcome{}, fmt.Errorf("a location that neither proxies nor answers")
}

// setting is the value of directive name on path's requests: its
// location's, else the server's, else def (nginx's default).
func (g *gateway) setting(path, name, def string) string {
	l := g.selectLocation(path)
	if l == nil {
		return def
	}
	for _, body := range [][]directive{l.body, g.server} {
		for _, d := range body {
			if d.name == name && len(d.args) == 1 {
				return d.args[0]
			}
		}
	}
	return def
}
