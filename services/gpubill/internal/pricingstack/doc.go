// Package pricingstack holds the tests of pricing composed with metering (the
// owner of parties and usage) on one pool and one JetStream, as `gpubill
// dev` composes them: rating exactly once (a killed pricing process
// included), REST quotes and cards, dead letters and the rating benchmark.
// They live in the edition that composes the services so that no service
// module requires another.
package pricingstack
