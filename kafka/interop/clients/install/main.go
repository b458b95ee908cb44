// Command install installs the client libraries the interop and cluster
// tests drive, before they run (`make deps` runs it): Debian's
// confluent-kafka and kafka-python, kcat, kafkajs and
// @confluentinc/kafka-javascript from npm (the latter built from source,
// which takes minutes on two cores, so that no test waits for it while
// others measure timings). The tests install what is missing themselves
// too; this only moves the work ahead of them. It exits 1 with the reason
// when an install fails.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

func main() {
	steps := []struct {
		name string
		do   func() error
	}{
		{"python3-confluent-kafka", func() error { return clients.EnsureDebian("import confluent_kafka", "python3-confluent-kafka") }},
		{"python3-kafka", func() error { return clients.EnsureDebian("import kafka", "python3-kafka") }},
		{"kcat", func() error { return clients.EnsureCommand("kcat", "kcat") }},
		{"kafkajs@" + clients.KafkaJSVersion, func() error { _, err := clients.EnsureKafkaJS(); return err }},
		{"@confluentinc/kafka-javascript@" + clients.KafkaJavaScriptVersion + " (built from source)", func() error { _, err := clients.EnsureKafkaJavaScript(); return err }},
	}
	for i, s := range steps {
		start := time.Now()
		fmt.Printf("[%d/%d] %s ... ", i+1, len(steps), s.name)
		if err := s.do(); err != nil {
			fmt.Println("failed")
			fmt.Fprintf(os.Stderr, "install %s: %v\n", s.name, err)
			os.Exit(1)
		}
		fmt.Printf("ready (%s)\n", time.Since(start).Round(100*time.Millisecond))
	}
}
