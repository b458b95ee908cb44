// Package interop holds the interoperability tests of the Kafka listener:
// real Kafka client libraries (franz-go, IBM/sarama, librdkafka through
// confluent-kafka-python and through @confluentinc/kafka-javascript,
// kafka-python, kafkajs) run consumer groups against a cohortd process. The package has no non-test code.
//
// The KIP-848 scenarios (kip848_test.go) run unmodified kgo consumers in
// this process with the consumer group protocol (kgo.ServerSideBalancer),
// once against kfake (the franz-go peer implementation, in process) and once
// against cohortd, as subtests named after the target, so that a difference
// shows side by side. The consumers write when they acquire and release
// each partition to one ownership log (ownership_test.go), whose checker
// reports any instant at which two consumers held one partition; member
// epochs must never go down, and every acknowledged commit must be found by
// OffsetFetch at the end. The cohortd subtests skip only while cohortd does
// not serve ConsumerGroupHeartbeat v1 (kgo would silently run the classic
// protocol); a target that lists it and then serves the classic protocol
// fails them.
//
// The librdkafka scenario (kip848_librdkafka_test.go) is a second client
// family on the consumer group protocol: librdkafka 2.15 with
// group.protocol=consumer through @confluentinc/kafka-javascript, one
// process per consumer (testdata/kafka_javascript_client.js, installed and
// built from source by the clients package), with classic librdkafka
// members joining its group; its ownership log comes from the consumers'
// rebalance callbacks, and a commit counts only when librdkafka's
// offset_commit_cb acknowledged it.
//
// The migration scenarios (kip848_migrate_test.go) roll classic kgo
// consumers to the consumer group protocol and back, one at a time, and
// watch the group's type (ListGroups v5) change once each way; kfake, which
// does not migrate a group with members, is checked for its refusal
// (GROUP_ID_NOT_FOUND). With COHORT_INTEROP_LOG_DIR set, each cohortd's
// whole log is kept there.
//
// kafka/interop is a module of its own (it replaces cohort with ../..), so
// that cohort's go.mod does not require the client libraries; the cohortd it
// tests is built in the cohort module, with cohort's go.mod.
package interop
