// Package benchmarks will hold the scenarios and harness of `queuebox bench`
// (spec/operations.md). Until then the figures come from Go benchmarks run
// by `make bench` against a durable throwaway cluster:
// BenchmarkClaimComplete and BenchmarkProducerInsert (dialects/postgres) and
// BenchmarkDrain (actors). docs/internals.md records the latest results.
package benchmarks
