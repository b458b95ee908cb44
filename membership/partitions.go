package membership

import (
	"cmp"
	"slices"

	"github.com/cohort-coord/cohort/assignor"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// set is a set of partitions.
type set map[TopicPartition]struct{}

func setOf(tps []assignor.TopicPartitions) set {
	s := set{}
	for _, tp := range tps {
		for _, p := range tp.Partitions {
			s[TopicPartition{tp.Topic, p}] = struct{}{}
		}
	}
	return s
}

// minus returns the partitions of s that are not in o.
func (s set) minus(o set) set {
	out := set{}
	for tp := range s {
		if _, ok := o[tp]; !ok {
			out[tp] = struct{}{}
		}
	}
	return out
}

// equal reports whether s and o hold the same partitions.
func (s set) equal(o set) bool {
	if len(s) != len(o) {
		return false
	}
	for tp := range s {
		if _, ok := o[tp]; !ok {
			return false
		}
	}
	return true
}

// union adds o to s.
func (s set) union(o set) {
	for tp := range o {
		s[tp] = struct{}{}
	}
}

// clone returns a copy of s.
func (s set) clone() set {
	out := make(set, len(s))
	out.union(s)
	return out
}

// list returns s by topic, topics and partitions sorted.
func (s set) list() []assignor.TopicPartitions {
	if len(s) == 0 {
		return nil
	}
	tps := make([]TopicPartition, 0, len(s))
	for tp := range s {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return cmp.Compare(a.Partition, b.Partition)
	})
	var out []assignor.TopicPartitions
	for _, tp := range tps {
		if n := len(out); n > 0 && out[n-1].Topic == tp.Topic {
			out[n-1].Partitions = append(out[n-1].Partitions, tp.Partition)
			continue
		}
		out = append(out, assignor.TopicPartitions{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	return out
}
