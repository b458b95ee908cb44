package coordinator

import "encoding/binary"

// subscriptionTopics reads the topic list of a ConsumerProtocol subscription
// (int16 version, then an int32-counted array of int16-length strings). Every
// version starts with it; the broker reads nothing else. assignor's decoder
// is not used here on purpose: it validates the whole subscription, and a
// subscription whose later fields are malformed must still count its topics,
// as Kafka's broker does.
func subscriptionTopics(b []byte) ([]string, bool) {
	if len(b) < 6 {
		return nil, false
	}
	if int16(binary.BigEndian.Uint16(b)) < 0 {
		return nil, false
	}
	n := int32(binary.BigEndian.Uint32(b[2:]))
	b = b[6:]
	if n < 0 || int(n) > len(b)/2 {
		return nil, false
	}
	topics := make([]string, 0, n)
	for range n {
		if len(b) < 2 {
			return nil, false
		}
		l := int16(binary.BigEndian.Uint16(b))
		b = b[2:]
		if l < 0 || int(l) > len(b) {
			return nil, false
		}
		topics = append(topics, string(b[:l]))
		b = b[l:]
	}
	return topics, true
}
