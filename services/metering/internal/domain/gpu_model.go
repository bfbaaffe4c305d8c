package domain

import (
	"slices"
	"time"

	"github.com/gpubill/gpubill/pkg/gpucatalog"
)

// GPUModel is one version of a model of the GPU catalogue (metering owns it).
type GPUModel struct {
	gpucatalog.Model
	Version   int64
	UpdatedAt time.Time
}

// SameContent reports whether two versions describe the model alike (a
// write that changes nothing makes no new version).
func (m GPUModel) SameContent(o gpucatalog.Model) bool {
	return m.ID == o.ID && m.Vendor == o.Vendor && m.MemoryGB == o.MemoryGB && m.DisplayName == o.DisplayName &&
		slices.Equal(m.Aliases, o.Aliases)
}

// CheckGPUModel validates a model against the catalogue it joins: its own
// fields, and no name another model already claims.
func CheckGPUModel(in gpucatalog.Model, others gpucatalog.Index) []Violation {
	var vs []Violation
	for _, v := range gpucatalog.Check(in) {
		vs = append(vs, Violation{Field: v.Field, Reason: v.Reason})
	}
	if len(vs) > 0 {
		return vs
	}
	for _, v := range others.Conflicts(in) {
		vs = append(vs, Violation{Field: v.Field, Reason: v.Reason})
	}
	return vs
}
