// Package interop holds the interoperability tests of the Kafka listener:
// real Kafka client libraries (franz-go, IBM/sarama, librdkafka through
// confluent-kafka-python, kafka-python, kafkajs) run consumer groups against a
// cohortd process. The package has no non-test code.
//
// kafka/interop is a module of its own (it replaces cohort with ../..), so
// that cohort's go.mod does not require the client libraries; the cohortd it
// tests is built in the cohort module, with cohort's go.mod.
package interop
