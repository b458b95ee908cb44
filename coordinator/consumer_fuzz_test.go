package coordinator

import (
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// FuzzConsumerGroup drives a consumer group with arbitrary heartbeats
// (any epoch, instance id, subscription, regex, assignor and owned
// partitions), topic changes and time steps. The harness checks after every
// call that no partition has two owners, that an error changes nothing and
// that the records replay to the same group.
//
//	go test -run '^$' -fuzz FuzzConsumerGroup -fuzztime 60s ./coordinator/
func FuzzConsumerGroup(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 3, 1, 1, 1})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 0, 1, 2, 0, 2, 200, 200, 200, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newCGHarness(t, map[string]int32{"t0": 3, "t1": 2})
		h.cfg.MaxSize = 3
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		ids := []string{"a", "b", "c", "d"}
		instances := []*string{nil, nil, strp("i0"), strp("i1"), strp("")}
		regexes := []*string{nil, nil, strp(""), strp("t.*"), strp("("), strp("t1")}
		assignors := []*string{nil, nil, strp("uniform"), strp("range"), strp("sticky")}
		topicLists := [][]string{nil, nil, {}, {"t0"}, {"t0", "t1", "t2"}, {"t1", "t1", ""}}
		for steps := 0; len(data) > 0 && steps < 200; steps++ {
			switch op := next() % 8; op {
			case 6:
				h.advance(time.Duration(next()) * time.Second)
			case 7:
				topics := map[string]int32{}
				for i, name := range []string{"t0", "t1", "t2"} {
					if n := next() % 6; n > 0 || i == 0 {
						topics[name] = int32(n)
					}
				}
				h.setTopics(topics)
			default:
				id := ids[next()%len(ids)]
				req := &ConsumerHeartbeatRequest{Version: int16(next() % 2), GroupID: "g", MemberID: id, RebalanceTimeoutMs: -1, GeneratedMemberID: "gen"}
				if next()%5 == 0 {
					req.MemberID = ""
				}
				cur := int32(0)
				if m := h.g.members[id]; m != nil {
					cur = m.epoch
				}
				req.MemberEpoch = []int32{0, -1, -2, cur, cur - 1, cur + 1, -3, 0}[next()%8]
				req.InstanceID = instances[next()%len(instances)]
				req.SubscribedTopicRegex = regexes[next()%len(regexes)]
				req.ServerAssignor = assignors[next()%len(assignors)]
				req.SubscribedTopicNames = topicLists[next()%len(topicLists)]
				if next()%2 == 0 {
					req.RebalanceTimeoutMs = int32(next() * 100)
				}
				switch next() % 4 {
				case 0:
					req.Topics = nil
				case 1:
					req.Topics = []assignor.TopicPartitions{}
				case 2:
					if m := h.g.members[id]; m != nil {
						req.Topics = m.assigned.list()
					}
				case 3:
					req.Topics = []assignor.TopicPartitions{{Topic: "t0", Partitions: []int32{int32(next()%5) - 1, 0}}}
				}
				h.hb(req)
			}
		}
	})
}
