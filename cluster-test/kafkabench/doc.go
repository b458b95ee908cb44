// Package kafkabench holds the Kafka listener benchmarks (see
// kafka/BENCHMARKS.md), which compare a cohort node and a three-node cluster
// with franz-go's kfake broker. They live in the cluster-test module so that
// the cohort module does not require kfake.
package kafkabench
