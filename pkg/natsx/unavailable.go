package natsx

import "github.com/gpubill/gpubill/pkg/apperr"

// Unavailable reports whether err says a dependency could not be reached or
// did not accept the work (apperr.Transient). Such a failure is not the
// message's fault, however often it repeats: it never counts toward
// dead-lettering, or a message that failed through an outage would be
// dead-lettered the moment the database came back (the chaos test saw a
// usage batch dead-lettered with "the database system is not yet accepting
// connections").
func Unavailable(err error) bool { return apperr.Transient(err) }
