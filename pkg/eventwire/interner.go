package eventwire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// internerFields is how many field numbers an Interner remembers a last
// value for (fields 1 to internerFields-1; higher ones go through the map).
const internerFields = 32

// Interner keeps one copy of each string a decode repeats (parties, GPU
// model, region, cycle: the same few values on every event of a batch).
// Each field's last value is checked first, by comparing bytes: the events
// of a batch are mostly in runs of one provider and lease, so hashing every
// field into the map cost more than the strings it saved (pricing's
// profile). An Interner lives for one decode, or one consumer's fetches;
// it is not safe for concurrent use.
type Interner struct {
	m    map[string]string
	last [internerFields]string // by field number
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner { return &Interner{m: map[string]string{}} }

// Get is field num's value b as a string, shared with the other values of
// the same bytes that went through in; false, and nothing kept, when b is
// not valid UTF-8 (what protobuf refuses in a proto3 string). Only bytes
// not seen before are checked: everything it keeps was checked once.
func (in *Interner) Get(num protowire.Number, b []byte) (string, bool) {
	if num > 0 && num < internerFields && in.last[num] == string(b) {
		return in.last[num], true
	}
	s, ok := in.m[string(b)] // no allocation for the lookup
	if !ok {
		if !utf8.Valid(b) {
			return "", false
		}
		s = string(b)
		in.m[s] = s
	}
	if num > 0 && num < internerFields {
		in.last[num] = s
	}
	return s, true
}
