package domain

import "time"

// GPUModelVersion is one version of a catalogue model as pricing keeps it
// (its read model of metering's GPU catalogue).
type GPUModelVersion struct {
	ID        string
	Aliases   []string
	Version   int64
	UpdatedAt time.Time
}
