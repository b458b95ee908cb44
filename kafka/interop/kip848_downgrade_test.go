package interop

import (
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The downgrade when the last consumer-protocol members leave at once
// (Kafka's convertToClassicGroup: the classic group rebalances and its
// members rejoin on REBALANCE_IN_PROGRESS). Each leave removes a member
// and bumps the group epoch; a classic member moves to a new epoch only by
// rejoining, so when the leaves come a few milliseconds apart the classic
// members still know the epoch from before the first one. Kafka converts at
// the group epoch before the last leave: a classic member is then behind,
// is told ILLEGAL_GENERATION, loses its partitions (kgo's OnPartitionsLost)
// and its next commit fails. cohort keeps the generation each classic
// member knows until the downgrade's rebalance: no classic consumer may
// lose a partition or have a commit refused, no partition has two owners,
// and every acknowledged commit is kept.
//
// Against cohort only: kfake does not migrate a group with members
// (TestKIP848OnlineMigration shows its refusal).
func TestKIP848DowngradeAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	tg := startTarget848(t, targetCohort)
	for _, tc := range []struct {
		name               string
		bal                classicBalancer
		classic, consumers int
	}{
		{"1 cooperative-sticky, 6 consumer", classicBalancers[0], 1, 6},
		{"2 range, 2 consumer", classicBalancers[1], 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("kip848-downgrade-at-once-%s-%d-%d", tc.bal.name, tc.classic, tc.consumers)
			createTopic(t, tg.admin, name, parts848)
			log, book := newOwnLog(), newCommitBook()
			var classic, consumers, all []*consumer848
			for i := range tc.classic {
				c := startConsumer848(t, tg, name, name, fmt.Sprintf("k%d", i), log, book,
					consumerOpts{classic: []kgo.GroupBalancer{tc.bal.bal()}, commitEvery: commitEvery848})
				classic = append(classic, c)
			}
			if why := waitFor(func() string { return checkClassicStable(tg, name, name, parts848, classic, log) }); why != "" {
				t.Fatalf("%s: %d classic consumers: %s", tg.name, tc.classic, why)
			}
			for i := range tc.consumers {
				consumers = append(consumers, startConsumer848(t, tg, name, name, fmt.Sprintf("n%d", i), log, book, consumerOpts{commitEvery: commitEvery848}))
			}
			all = append(append(all, classic...), consumers...)
			v := waitStable848(t, tg, name, name, parts848, all, log, "upgraded")
			knew := map[string]int32{}
			for _, c := range classic {
				_, knew[c.name] = c.cl.GroupMetadata()
			}
			var wg sync.WaitGroup
			for _, c := range consumers {
				wg.Go(c.close)
			}
			wg.Wait()
			if why := waitFor(func() string { return checkClassicStable(tg, name, name, parts848, classic, log) }); why != "" {
				t.Fatalf("%s: after the %d consumer-protocol consumers left: %s", tg.name, tc.consumers, why)
			}
			commitAll(t, tg, classic, parts848, "classic consumers after the downgrade")
			for _, c := range classic {
				c.close()
			}
			evs, _ := log.snapshot()
			for _, e := range evs {
				if e.cause == "lost" && (e.consumer[0] == 'k') {
					t.Errorf("%s: %s lost partition %d at %v (member %s, epoch %d)", tg.name, e.consumer, e.partition, e.begin, e.member, e.epoch)
				}
			}
			for _, c := range classic {
				if n := c.refused.Load(); n != 0 {
					t.Errorf("%s: %s had %d commits refused", tg.name, c.name, n)
				}
				if manage, _ := c.groupErrors(); len(manage) > 0 {
					t.Errorf("%s: %s's group session ended: %v", tg.name, c.name, manage)
				}
			}
			checkLog(t, tg, log)
			book.check(t, tg, name, name)
			t.Logf("%s: the consumer group was at epoch %d; the classic consumers knew generations %v; %d leaves then bumped the epoch to %d before the downgrade",
				tg.name, v.epoch, knew, tc.consumers, v.epoch+int32(tc.consumers)-1)
		})
	}
}
