// Package interop holds the interoperability tests of the Kafka listener:
// real Kafka client libraries (franz-go, IBM/sarama, librdkafka through
// confluent-kafka-python, kafka-python, kafkajs) run consumer groups against a
// cohortd process. The package has no non-test code.
package interop
