// Package deploycheck holds tests that keep deploy/ true to the code: the
// Prometheus alert rules and the Grafana dashboards name only metrics a
// gpubill process serves; every series an alert reads is on a dashboard
// panel, whose thresholds turn red where the alert fires, and the
// dashboards load (one schema version, unique ids, panels not
// overlapping); deploy/nginx.conf routes every REST path of the protos to
// the process that serves it; docker-compose.yml runs what nginx.conf
// names, requires the signing key and publishes only the gateway.
package deploycheck
