// Package settlementstack holds the tests of settlement composed with the
// real tax service (and the real ledger, or pkg/testkit/fakeledger) on a
// Temporal dev server, as `gpubill dev` composes them: a close against the
// real ledger, a worker killed or restarted mid-close, the remittance, a
// page's outcomes, a 10 ETH settlement and the settlement benchmarks. They
// live in the edition that composes the services so that no service module
// requires another; settlement.Service.TestHooks is what they reach inside
// settlement.
package settlementstack
