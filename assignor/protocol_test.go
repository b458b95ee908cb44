package assignor

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The reference vectors: topics=[t], owned {t:[0]}, gen=5, rack "r",
// userData null.
const (
	vecSubV0 = "0000 00000001 0001 74 ffffffff"
	vecSubV1 = "0001 00000001 0001 74 ffffffff 00000001 0001 74 00000001 00000000"
	vecSubV2 = "0002 00000001 0001 74 ffffffff 00000001 0001 74 00000001 00000000 00000005"
	vecSubV3 = "0003 00000001 0001 74 ffffffff 00000001 0001 74 00000001 00000000 00000005 0001 72"
)

func TestSubscriptionVectors(t *testing.T) {
	owned := []TopicPartitions{{Topic: "t", Partitions: []int32{0}}}
	cases := []struct {
		hex  string
		want Subscription
	}{
		{vecSubV0, Subscription{Version: 0, Topics: []string{"t"}, Generation: -1}},
		{vecSubV1, Subscription{Version: 1, Topics: []string{"t"}, OwnedPartitions: owned, Generation: -1}},
		{vecSubV2, Subscription{Version: 2, Topics: []string{"t"}, OwnedPartitions: owned, Generation: 5}},
		{vecSubV3, Subscription{Version: 3, Topics: []string{"t"}, OwnedPartitions: owned, Generation: 5, Rack: "r"}},
	}
	for _, c := range cases {
		b := unhex(t, c.hex)
		got, err := DecodeSubscription(b)
		if err != nil {
			t.Fatalf("v%d: decode: %v", c.want.Version, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("v%d: decoded %+v, want %+v", c.want.Version, got, c.want)
		}
		// Encoding the full value at the vector's version gives the vector.
		full := Subscription{Version: c.want.Version, Topics: []string{"t"}, OwnedPartitions: owned, Generation: 5, Rack: "r"}
		if enc := full.AppendTo(nil); !bytes.Equal(enc, b) {
			t.Errorf("v%d: encoded %x, want %x", c.want.Version, enc, b)
		}
		// kmsg agrees on every version.
		var km kmsg.ConsumerMemberMetadata
		if err := km.ReadFrom(b); err != nil {
			t.Fatalf("v%d: kmsg: %v", c.want.Version, err)
		}
		if km.Version != c.want.Version || km.Generation != c.want.Generation {
			t.Errorf("v%d: kmsg read version %d generation %d", c.want.Version, km.Version, km.Generation)
		}
	}
}

func TestSubscriptionFutureVersion(t *testing.T) {
	b := unhex(t, vecSubV3)
	b[1] = 100             // version 100
	b = append(b, 1, 2, 3) // unknown trailing fields
	got, err := DecodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 100 || got.Generation != 5 || got.Rack != "r" || len(got.OwnedPartitions) != 1 {
		t.Fatalf("got %+v", got)
	}
}

func TestSubscriptionV1WithoutOwnedFallsBackToV0(t *testing.T) {
	b := unhex(t, "0001 00000001 0001 74 00000002 abcd")
	got, err := DecodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || !reflect.DeepEqual(got.Topics, []string{"t"}) || !bytes.Equal(got.UserData, []byte{0xab, 0xcd}) || got.OwnedPartitions != nil {
		t.Fatalf("got %+v", got)
	}
}

func TestSubscriptionNullAndEmptyRack(t *testing.T) {
	s := Subscription{Version: 3, Topics: []string{"a"}, Generation: 7}
	b := s.AppendTo(nil)
	if !bytes.HasSuffix(b, []byte{0xff, 0xff}) {
		t.Fatalf("empty rack should encode as null: %x", b)
	}
	// An explicit empty-string rack decodes as absent.
	b2 := append(b[:len(b)-2:len(b)-2], 0, 0)
	got, err := DecodeSubscription(b2)
	if err != nil || got.Rack != "" || got.Generation != 7 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestAssignmentVector(t *testing.T) {
	want := unhex(t, "0003 00000001 0001 74 00000002 00000000 00000001 ffffffff")
	a := Assignment{Version: 3, Topics: []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}}
	if got := a.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoded %x, want %x", got, want)
	}
	if a.EncodedSize() != len(want) {
		t.Fatalf("EncodedSize %d, want %d", a.EncodedSize(), len(want))
	}
	for v := int16(0); v <= 4; v++ {
		b := bytes.Clone(want)
		b[1] = byte(v)
		got, err := DecodeAssignment(b)
		if err != nil {
			t.Fatal(err)
		}
		a.Version = v
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("v%d: got %+v, want %+v", v, got, a)
		}
	}
	var km kmsg.ConsumerMemberAssignment
	if err := km.ReadFrom(want); err != nil || len(km.Topics) != 1 || km.Topics[0].Topic != "t" {
		t.Fatalf("kmsg: %+v %v", km, err)
	}
}

func TestStickyUserDataVector(t *testing.T) {
	want := unhex(t, "00000001 0001 74 00000001 00000000 00000005")
	u := StickyUserData{Owned: []TopicPartitions{{Topic: "t", Partitions: []int32{0}}}, Generation: 5}
	if got := u.AppendTo(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoded %x, want %x", got, want)
	}
	var d Decoder
	got, err := d.DecodeStickyUserData(want)
	if err != nil || !reflect.DeepEqual(got, u) {
		t.Fatalf("got %+v %v", got, err)
	}
	// V0: no generation.
	got, err = d.DecodeStickyUserData(want[:len(want)-4])
	if err != nil || got.Generation != DefaultGeneration || len(got.Owned) != 1 {
		t.Fatalf("v0: got %+v %v", got, err)
	}
	if _, err := d.DecodeStickyUserData([]byte{0, 0, 0, 9}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("garbage: err %v", err)
	}
}

func TestCooperativeUserData(t *testing.T) {
	b := AppendCooperativeUserData(nil, 10)
	if !bytes.Equal(b, []byte{0, 0, 0, 10}) {
		t.Fatalf("%x", b)
	}
	if g, ok := DecodeCooperativeUserData(b); !ok || g != 10 {
		t.Fatalf("%d %v", g, ok)
	}
	if g, ok := DecodeCooperativeUserData(nil); ok || g != -1 {
		t.Fatalf("%d %v", g, ok)
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, h := range []string{
		"",
		"00",
		"ffff 00000000 ffffffff",             // negative version
		"0000 7fffffff",                      // huge topic count
		"0000 00000001 fffe",                 // negative string length
		"0000 00000001 0005 74",              // short string
		"0000 00000000 fffffffe",             // negative bytes length
		"0003 00000000 ffffffff 00000001 00", // truncated owned
	} {
		b := unhex(t, h)
		if _, err := DecodeSubscription(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("subscription %q: err %v", h, err)
		}
		if _, err := DecodeAssignment(b); err == nil && len(b) < 10 {
			t.Errorf("assignment %q: no error", h)
		}
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	st := MemberState{
		Topics:     []string{"b", "a", "b"},
		Owned:      []TopicPartitions{{Topic: "b", Partitions: []int32{2, 0}}, {Topic: "a", Partitions: []int32{1}}},
		Generation: 9,
		Rack:       "r1",
	}
	sortedOwned := []TopicPartitions{{Topic: "a", Partitions: []int32{1}}, {Topic: "b", Partitions: []int32{0, 2}}}
	for _, b := range []Balancer{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
		s, err := DecodeSubscription(b.Metadata(st))
		if err != nil {
			t.Fatal(err)
		}
		if s.Version != 3 || !reflect.DeepEqual(s.Topics, []string{"a", "b"}) || s.Generation != 9 || s.Rack != "r1" {
			t.Errorf("%s: %+v", b.ProtocolName(), s)
		}
		owned, gen := claims(&s, b.IsCooperative(), &Decoder{})
		switch b.ProtocolName() {
		case "sticky", "cooperative-sticky":
			if !reflect.DeepEqual(owned, sortedOwned) || gen != 9 {
				t.Errorf("%s: claims %v gen %d", b.ProtocolName(), owned, gen)
			}
		default:
			if s.OwnedPartitions != nil || s.UserData != nil {
				t.Errorf("%s: %+v", b.ProtocolName(), s)
			}
		}
		if b.ProtocolName() == "cooperative-sticky" && !bytes.Equal(s.UserData, []byte{0, 0, 0, 9}) {
			t.Errorf("cooperative userData %x", s.UserData)
		}
		if b.ProtocolName() == "sticky" && s.OwnedPartitions != nil {
			t.Errorf("eager sticky must not send owned partitions")
		}
	}
	// A sticky member without history sends null userData.
	s, _ := DecodeSubscription(Sticky().Metadata(MemberState{Topics: []string{"a"}, Generation: -1}))
	if s.UserData != nil {
		t.Errorf("userData %x", s.UserData)
	}
}

func TestProtocols(t *testing.T) {
	for _, c := range []struct {
		b    Balancer
		name string
		want []RebalanceProtocol
	}{
		{Range(), "range", []RebalanceProtocol{Eager}},
		{RoundRobin(), "roundrobin", []RebalanceProtocol{Eager}},
		{Sticky(), "sticky", []RebalanceProtocol{Eager}},
		{CooperativeSticky(), "cooperative-sticky", []RebalanceProtocol{Cooperative, Eager}},
	} {
		if c.b.ProtocolName() != c.name || !reflect.DeepEqual(c.b.SupportedProtocols(), c.want) {
			t.Errorf("%s: %v", c.b.ProtocolName(), c.b.SupportedProtocols())
		}
		if c.b.IsCooperative() != (c.want[0] == Cooperative) {
			t.Errorf("%s: IsCooperative", c.name)
		}
		if b, ok := ByName(c.name); !ok || b.ProtocolName() != c.name {
			t.Errorf("ByName(%s)", c.name)
		}
	}
	if p, ok := CommonProtocol(Range(), CooperativeSticky()); !ok || p != Eager {
		t.Errorf("range+coop: %v %v", p, ok)
	}
	if p, ok := CommonProtocol(CooperativeSticky()); !ok || p != Cooperative {
		t.Errorf("coop: %v %v", p, ok)
	}
}

func FuzzDecode(f *testing.F) {
	for _, h := range []string{vecSubV0, vecSubV1, vecSubV2, vecSubV3,
		"0003 00000001 0001 74 00000002 00000000 00000001 ffffffff",
		"00000001 0001 74 00000001 00000000 00000005"} {
		f.Add(unhex(f, h))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Decoder
		var s Subscription
		if err := d.DecodeSubscription(b, &s); err == nil {
			// Re-encoding at the decoded version (capped) decodes to the same value.
			s2, err := DecodeSubscription(s.AppendTo(nil))
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if !reflect.DeepEqual(normalize(s), normalize(s2)) {
				t.Fatalf("round trip: %+v vs %+v", s, s2)
			}
			// Decoded subscriptions never make an assignor panic.
			members := []Member{{ID: "a", Subscription: s}, {ID: "b", Subscription: s2}}
			topics := map[string]int32{}
			for i, tp := range s.Topics {
				topics[tp] = int32(i % 4)
			}
			for _, bal := range []Balancer{Range(), RoundRobin(), Sticky(), CooperativeSticky()} {
				checkValid(t, bal, members, topics, bal.Balance(members, topics))
			}
		}
		checkAssignedPartitions(t, b)
		_, _ = d.DecodeStickyUserData(b)
	})
}

// checkAssignedPartitions checks that walking b's assigned partitions
// finds what DecodeAssignment does: the same error, and on success the same
// partitions in the same order.
func checkAssignedPartitions(t *testing.T, b []byte) {
	t.Helper()
	a, err := DecodeAssignment(b)
	var got []TopicPartitions
	w := NewAssignedPartitions(b)
	for w.Next() {
		if n := len(got); n == 0 || got[n-1].Topic != string(w.Topic()) {
			got = append(got, TopicPartitions{Topic: string(w.Topic())})
		}
		got[len(got)-1].Partitions = append(got[len(got)-1].Partitions, w.Partition())
	}
	if werr := w.Err(); werr != err {
		t.Fatalf("walk error %v, DecodeAssignment %v", werr, err)
	}
	if err != nil {
		return
	}
	var want []TopicPartitions
	for _, tp := range a.Topics {
		if len(tp.Partitions) > 0 {
			// The walk sees a topic through its partitions; consecutive
			// entries of one topic read as one.
			if n := len(want); n > 0 && want[n-1].Topic == tp.Topic {
				want[n-1].Partitions = append(want[n-1].Partitions, tp.Partitions...)
				continue
			}
			want = append(want, TopicPartitions{Topic: tp.Topic, Partitions: slices.Clone(tp.Partitions)})
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("walk %v, DecodeAssignment %v", got, want)
	}
}

func TestAssignedPartitions(t *testing.T) {
	a := Assignment{Version: 3, Topics: []TopicPartitions{{Topic: "t", Partitions: []int32{2, 0}}, {Topic: "e"}, {Topic: "u", Partitions: []int32{7}}}, UserData: []byte("x")}
	b := a.AppendTo(nil)
	checkAssignedPartitions(t, b)
	w := NewAssignedPartitions(b)
	var got []string
	for w.Next() {
		got = append(got, fmt.Sprintf("%s/%d", w.Topic(), w.Partition()))
	}
	if want := []string{"t/2", "t/0", "u/7"}; !slices.Equal(got, want) || w.Err() != nil {
		t.Fatalf("walk %v (%v), want %v", got, w.Err(), want)
	}
	// Every truncation, and damaged user data, fail as DecodeAssignment does.
	for n := range len(b) {
		checkAssignedPartitions(t, b[:n])
	}
	checkAssignedPartitions(t, append(b[:len(b)-5:len(b)-5], 0xff, 0xff, 0xff, 0xfe))
	checkAssignedPartitions(t, []byte{0xff, 0xff})
	w = NewAssignedPartitions(b[:len(b)-1])
	if w.Err() == nil {
		t.Fatal("a truncated assignment walked without error")
	}
}

func normalize(s Subscription) Subscription {
	if len(s.Topics) == 0 {
		s.Topics = nil
	}
	if len(s.OwnedPartitions) == 0 {
		s.OwnedPartitions = nil
	}
	for i := range s.OwnedPartitions {
		if len(s.OwnedPartitions[i].Partitions) == 0 {
			s.OwnedPartitions[i].Partitions = nil
		}
	}
	return s
}
