// Package deploycheck holds tests that keep deploy/ true to the code: the
// Prometheus alert rules name only metrics a gpubill process serves.
package deploycheck
