// Package gpucatalog is the grammar and the seed of the one GPU catalogue.
// Metering owns the catalogue (GET/POST /v1/gpu-models) and publishes every
// version as gpu_model.updated.{id}; pricing keeps a read model of it. Both
// start from Seed, so a rate card and a usage event agree on the seeded
// models before the first event has flowed.
package gpucatalog

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Limits of a catalogue entry.
const (
	IDLenMax          = 32
	AliasLenMax       = 40
	AliasesMax        = 16
	DisplayNameLenMax = 80
	MemoryGBMax       = 4096
	ModelsMax         = 1000 // the whole catalogue, also the most one list answers
)

// Vendors a model may name.
var Vendors = []string{"nvidia", "amd", "intel", "huawei", "other"}

// Model is one GPU model: ID is what usage events and rate cards carry
// (canonical); an alias (e.g. "RTX4090D") is accepted in their place and
// stored as the ID. Names match case-insensitively.
type Model struct {
	ID          string
	Vendor      string
	MemoryGB    int
	DisplayName string
	Aliases     []string
}

var (
	idRe    = regexp.MustCompile(`^[A-Z0-9][A-Z0-9_]*$`)
	aliasRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]*[A-Za-z0-9]$|^[A-Za-z0-9]$`)
)

// Key is how a name is matched: trimmed and upper-cased.
func Key(name string) string { return strings.ToUpper(strings.TrimSpace(name)) }

// Violation is one field of a model that is not valid, with why.
type Violation struct {
	Field, Reason string
}

// Check validates a model's fields (not its collisions with other models).
func Check(m Model) []Violation {
	var vs []Violation
	add := func(f, format string, a ...any) { vs = append(vs, Violation{f, fmt.Sprintf(format, a...)}) }
	switch {
	case m.ID == "":
		add("gpu_model", "required")
	case len(m.ID) > IDLenMax || !idRe.MatchString(m.ID):
		add("gpu_model", "%q: upper-case letters, digits and _, starting with a letter or digit, at most %d characters (e.g. RTX_4090D)", m.ID, IDLenMax)
	}
	if !contains(Vendors, m.Vendor) {
		add("vendor", "%q: one of %s", m.Vendor, strings.Join(Vendors, ", "))
	}
	if m.MemoryGB < 1 || m.MemoryGB > MemoryGBMax {
		add("memory_gb", "%d outside 1..%d", m.MemoryGB, MemoryGBMax)
	}
	if m.DisplayName == "" || len(m.DisplayName) > DisplayNameLenMax {
		add("display_name", "required, at most %d characters", DisplayNameLenMax)
	}
	if len(m.Aliases) > AliasesMax {
		add("aliases", "%d aliases; at most %d", len(m.Aliases), AliasesMax)
	}
	seen := map[string]bool{Key(m.ID): true}
	for i, a := range m.Aliases {
		f := fmt.Sprintf("aliases[%d]", i)
		switch {
		case len(a) > AliasLenMax || !aliasRe.MatchString(a):
			add(f, "%q: letters, digits, space, '.', '_' and '-', at most %d characters", a, AliasLenMax)
		case seen[Key(a)]:
			add(f, "%q repeats the model's id or another alias", a)
		}
		seen[Key(a)] = true
	}
	return vs
}

// Index resolves a name (an id or an alias, any case) to its model's id.
type Index map[string]string

// NewIndex indexes models; a name two models claim is an error.
func NewIndex(models []Model) (Index, error) {
	ix := make(Index, len(models)*3)
	for _, m := range models {
		for _, n := range append([]string{m.ID}, m.Aliases...) {
			k := Key(n)
			if other, ok := ix[k]; ok && other != m.ID {
				return nil, fmt.Errorf("%q names both %s and %s", n, other, m.ID)
			}
			ix[k] = m.ID
		}
	}
	return ix, nil
}

// Resolve returns the id a name stands for.
func (ix Index) Resolve(name string) (string, bool) {
	id, ok := ix[Key(name)]
	return id, ok
}

// Conflicts names the aliases (or id) of m that another model of ix already
// claims.
func (ix Index) Conflicts(m Model) []Violation {
	var vs []Violation
	if other, ok := ix[Key(m.ID)]; ok && other != m.ID {
		vs = append(vs, Violation{"gpu_model", fmt.Sprintf("%q is an alias of %s", m.ID, other)})
	}
	for i, a := range m.Aliases {
		if other, ok := ix[Key(a)]; ok && other != m.ID {
			vs = append(vs, Violation{fmt.Sprintf("aliases[%d]", i), fmt.Sprintf("%q already names %s", a, other)})
		}
	}
	return vs
}

// Seed is the catalogue a new installation starts with: common data-centre
// and consumer models, including those most rented in China (H20, H800,
// A800, L20, RTX 4090D). Memory is the common variant's.
func Seed() []Model {
	out := make([]Model, len(seed))
	for i, m := range seed {
		m.Aliases = append([]string(nil), m.Aliases...)
		out[i] = m
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

var seed = []Model{
	// NVIDIA data centre
	{"T4", "nvidia", 16, "NVIDIA T4", []string{"Tesla T4"}},
	{"V100", "nvidia", 32, "NVIDIA V100", []string{"Tesla V100"}},
	{"A10", "nvidia", 24, "NVIDIA A10", nil},
	{"A30", "nvidia", 24, "NVIDIA A30", nil},
	{"A40", "nvidia", 48, "NVIDIA A40", nil},
	{"A100", "nvidia", 80, "NVIDIA A100", []string{"A100-80G", "A100 80GB"}},
	{"A800", "nvidia", 80, "NVIDIA A800", []string{"A800-80G", "A800 80GB"}},
	{"H100", "nvidia", 80, "NVIDIA H100", []string{"H100-80G", "H100 SXM"}},
	{"H800", "nvidia", 80, "NVIDIA H800", []string{"H800-80G"}},
	{"H20", "nvidia", 96, "NVIDIA H20", []string{"H20-96G"}},
	{"H200", "nvidia", 141, "NVIDIA H200", nil},
	{"B200", "nvidia", 192, "NVIDIA B200", nil},
	{"L4", "nvidia", 24, "NVIDIA L4", nil},
	{"L20", "nvidia", 48, "NVIDIA L20", nil},
	{"L40", "nvidia", 48, "NVIDIA L40", nil},
	{"L40S", "nvidia", 48, "NVIDIA L40S", []string{"L40-S"}},
	// NVIDIA workstation
	{"A4000", "nvidia", 16, "NVIDIA RTX A4000", []string{"RTX A4000"}},
	{"A5000", "nvidia", 24, "NVIDIA RTX A5000", []string{"RTX A5000"}},
	{"A6000", "nvidia", 48, "NVIDIA RTX A6000", []string{"RTX A6000"}},
	// NVIDIA consumer
	{"RTX_3080", "nvidia", 10, "GeForce RTX 3080", []string{"RTX3080", "RTX 3080"}},
	{"RTX_3090", "nvidia", 24, "GeForce RTX 3090", []string{"RTX3090", "RTX 3090"}},
	{"RTX_4080", "nvidia", 16, "GeForce RTX 4080", []string{"RTX4080", "RTX 4080"}},
	{"RTX_4090", "nvidia", 24, "GeForce RTX 4090", []string{"RTX4090", "RTX 4090"}},
	{"RTX_4090D", "nvidia", 24, "GeForce RTX 4090 D", []string{"RTX4090D", "RTX 4090D", "RTX 4090 D", "4090D"}},
	{"RTX_5090", "nvidia", 32, "GeForce RTX 5090", []string{"RTX5090", "RTX 5090"}},
	// AMD
	{"MI250", "amd", 128, "AMD Instinct MI250", nil},
	{"MI300X", "amd", 192, "AMD Instinct MI300X", nil},
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
