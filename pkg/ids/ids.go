// Package ids makes identifiers: time-ordered UUIDv7 strings with a prefix.
package ids

import "github.com/google/uuid"

// New returns prefix + "_" + a UUIDv7 (time-ordered, so ids index well).
func New(prefix string) string {
	u, err := uuid.NewV7()
	if err != nil {
		u = uuid.New()
	}
	if prefix == "" {
		return u.String()
	}
	return prefix + "_" + u.String()
}
