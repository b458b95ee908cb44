package kafka

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/tripwire"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// The consumer protocol's requests and answers are mapped by hand between
// kmsg and the native messages (consumer.go). These tests fill every field
// on one side, by reflection (kmsg) or from the descriptor (protobuf), so a
// field either side gains fails them, named, until it is mapped or listed
// here as ignored on purpose.

// Fields left alone on purpose, by path.
var (
	// kmsg request fields the listener does not pass on.
	heartbeatRequestIgnored = []string{
		"Version",     // the request's version goes as api_version
		"UnknownTags", // tagged fields no version of Kafka defines
	}
	// Native answer fields that do not reach Kafka's wire.
	describeAnswerIgnored = []string{
		"group_id",         // the group is answered under the id asked for
		"members[0].state", // reconciliation state, for operators
	}
	// kmsg answer fields the native answer does not fill (the listener
	// may, by itself).
	heartbeatKafkaUnfilled = []string{"Version", "ThrottleMillis", "ErrorCode", "UnknownTags", "Assignment.UnknownTags", "Assignment.Topics[0].UnknownTags"}
	describeKafkaUnfilled  = []string{"ErrorCode", "UnknownTags", "Members[0].UnknownTags",
		"Members[0].Assignment.UnknownTags", "Members[0].Assignment.TopicPartitions[0].UnknownTags",
		"Members[0].TargetAssignment.UnknownTags", "Members[0].TargetAssignment.TopicPartitions[0].UnknownTags"}
)

// TestHeartbeatRequestMapsEveryField fills every field of kmsg's request,
// at every version, maps it, and maps the native request back: what does
// not come back was dropped. At the newest version every field of the
// native request must be set.
func TestHeartbeatRequestMapsEveryField(t *testing.T) {
	l, _ := mappingListener(t, nil)
	for v := range kmsg.NewPtrConsumerGroupHeartbeatRequest().MaxVersion() + 1 {
		filled := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		tripwire.FillStruct(filled, 2, heartbeatRequestIgnored...)
		filled.SetVersion(v)
		for i, t := range filled.Topics { // owned topics the catalog knows
			mustCreate(l, fmt.Sprintf("owned-%d-%d", v, i), t.TopicID)
		}
		// Through the wire, so the fields of later versions are dropped.
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.SetVersion(v)
		if err := req.ReadFrom(filled.AppendTo(nil)); err != nil {
			t.Fatal(err)
		}
		n, dropped := l.heartbeatRequest(mappingRequest(l, v), req)
		if dropped != 0 {
			t.Fatalf("v%d: %d owned topics dropped", v, dropped)
		}
		back := heartbeatFromNative(t, l, n)
		for _, d := range tripwire.DiffStruct(req, back) {
			t.Errorf("v%d: the listener does not pass on %s", v, d)
		}
		if v == req.MaxVersion() {
			m := n.ProtoReflect()
			fields := m.Descriptor().Fields()
			for i := range fields.Len() {
				if fd := fields.Get(i); !m.Has(fd) {
					t.Errorf("v%d: the listener does not set %s", v, fd.Name())
				}
			}
		}
	}
}

// heartbeatFromNative is the kmsg request a native request was mapped
// from: the inverse of heartbeatRequest, but for the ignored fields.
func heartbeatFromNative(t *testing.T, l *Listener, n *grouppb.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatRequest {
	t.Helper()
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.SetVersion(int16(n.ApiVersion))
	r.Group, r.MemberID, r.MemberEpoch, r.InstanceID, r.RackID = n.GroupId, n.MemberId, n.MemberEpoch, n.InstanceId, n.RackId
	r.RebalanceTimeoutMillis, r.SubscribedTopicRegex, r.ServerAssignor = n.RebalanceTimeoutMs, n.SubscribedTopicRegex, n.ServerAssignor
	if n.SubscribedTopicNamesSet {
		r.SubscribedTopicNames = append([]string{}, n.SubscribedTopicNames...)
	}
	if n.TopicsSet {
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	}
	for _, tp := range n.Topics {
		topic, ok := l.topics.Get(tp.Name)
		if !ok {
			t.Fatalf("native request names %q, not in the catalog", tp.Name)
		}
		r.Topics = append(r.Topics, owned(topic.ID, tp.Partitions...))
	}
	return r
}

// TestDescribeRequestFields: the fields of kmsg's ConsumerGroupDescribe
// request and of the native one are those the listener knows.
func TestDescribeRequestFields(t *testing.T) {
	var kfields []string
	rt := reflect.TypeFor[kmsg.ConsumerGroupDescribeRequest]()
	for i := range rt.NumField() {
		kfields = append(kfields, rt.Field(i).Name)
	}
	// Groups: a native call each; IncludeAuthorizedOperations: answered by
	// the listener; Version and UnknownTags as for the heartbeat.
	if want := []string{"Version", "Groups", "IncludeAuthorizedOperations", "UnknownTags"}; !slices.Equal(kfields, want) {
		t.Errorf("kmsg.ConsumerGroupDescribeRequest has fields %v, the listener knows %v", kfields, want)
	}
	var nfields []string
	fields := (&grouppb.ConsumerGroupDescribeRequest{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		nfields = append(nfields, string(fields.Get(i).Name()))
	}
	if want := []string{"group_id"}; !slices.Equal(nfields, want) {
		t.Errorf("grouppb.ConsumerGroupDescribeRequest has fields %v, the listener sets %v", nfields, want)
	}
}

// TestHeartbeatAnswerMapsEveryField changes each field of a filled native
// answer in turn: the Kafka answer must change with it. The Kafka answer
// of the filled native one must have every field set.
func TestHeartbeatAnswerMapsEveryField(t *testing.T) {
	l, _ := mappingListener(t, nil)
	base := &grouppb.ConsumerGroupHeartbeatResponse{}
	tripwire.Fill(base, 0)
	base.ErrorCode = 0
	catalogKnows(l, base)
	answer := func(m proto.Message) *kmsg.ConsumerGroupHeartbeatResponse {
		resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
		l.heartbeatAnswer(m.(*grouppb.ConsumerGroupHeartbeatResponse), resp)
		return resp
	}
	eachChanged(t, base, nil, func(path string, m proto.Message) {
		if len(tripwire.DiffStruct(answer(base), answer(m))) == 0 {
			t.Errorf("the listener does not map %s", path)
		}
	})
	unfilled(t, answer(base), heartbeatKafkaUnfilled)
}

func TestDescribeAnswerMapsEveryField(t *testing.T) {
	l, _ := mappingListener(t, nil)
	base := &grouppb.ConsumerGroupDescribeResponse{}
	tripwire.Fill(base, 0)
	base.ErrorCode = 0
	catalogKnows(l, base)
	answer := func(m proto.Message) *kmsg.ConsumerGroupDescribeResponseGroup {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		l.describedGroup(mappingRequest(l, 1), m.(*grouppb.ConsumerGroupDescribeResponse), &g)
		return &g
	}
	eachChanged(t, base, describeAnswerIgnored, func(path string, m proto.Message) {
		if len(tripwire.DiffStruct(answer(base), answer(m))) == 0 {
			t.Errorf("the listener does not map %s", path)
		}
	})
	// The base member is a classic one (every native field set): its
	// MemberType is 0, and the consumer-protocol member's is filled.
	consumer := proto.CloneOf(base)
	consumer.Members[0].Classic = false
	g := answer(consumer)
	g.Group = "g" // the listener's, from the request
	unfilled(t, g, describeKafkaUnfilled)
	if c, k := answer(base).Members[0].MemberType, g.Members[0].MemberType; c != classicMemberType || k != consumerMemberType {
		t.Errorf("member types: classic %d, consumer %d", c, k)
	}
}

func mustCreate(l *Listener, name string, id [16]byte) {
	if err := l.topics.Apply(catalog.CreateTopic{Name: name, ID: id, Partitions: 1}); err != nil {
		panic(err)
	}
}

// catalogKnows creates the topics a native message names (in its
// TopicPartitions), so that mapping it leaves none out.
func catalogKnows(l *Listener, m proto.Message) {
	var walk func(protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if tp, ok := m.Interface().(*grouppb.TopicPartitions); ok {
			if _, known := l.topics.Get(tp.Name); !known {
				mustCreate(l, tp.Name, catalog.NewTopicID())
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
}

// eachChanged calls fn with a copy of base in which one leaf field (through
// the first element of a repeated message) has another value, for every
// leaf but those ignored.
func eachChanged(t *testing.T, base proto.Message, ignored []string, fn func(path string, m proto.Message)) {
	t.Helper()
	var paths [][]protoreflect.FieldDescriptor
	var collect func(protoreflect.MessageDescriptor, []protoreflect.FieldDescriptor)
	collect = func(d protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) {
		fields := d.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			p := append(slices.Clip(prefix), fd)
			if fd.IsMap() {
				t.Fatalf("%s: a map field, not handled here", fd.FullName())
			}
			if fd.Message() != nil {
				collect(fd.Message(), p)
				continue
			}
			paths = append(paths, p)
		}
	}
	collect(base.ProtoReflect().Descriptor(), nil)
	seen := map[string]bool{}
	for _, p := range paths {
		name := pathName(p)
		seen[name] = true
		if slices.Contains(ignored, name) {
			continue
		}
		m := proto.Clone(base)
		change(t, m.ProtoReflect(), p)
		fn(name, m)
	}
	for _, name := range ignored {
		if !seen[name] {
			t.Errorf("ignored field %s does not exist", name)
		}
	}
}

func pathName(p []protoreflect.FieldDescriptor) string {
	s := ""
	for i, fd := range p {
		if i > 0 {
			s += "."
		}
		s += string(fd.Name())
		if fd.IsList() && i < len(p)-1 {
			s += "[0]"
		}
	}
	return s
}

// change gives the leaf at path in m (filled) another value.
func change(t *testing.T, m protoreflect.Message, path []protoreflect.FieldDescriptor) {
	t.Helper()
	for _, fd := range path[:len(path)-1] {
		if fd.IsList() {
			m = m.Mutable(fd).List().Get(0).Message()
		} else {
			m = m.Mutable(fd).Message()
		}
	}
	fd := path[len(path)-1]
	if fd.IsList() {
		l := m.Mutable(fd).List()
		l.Append(l.Get(0))
		return
	}
	v := m.Get(fd)
	switch fd.Kind() {
	case protoreflect.BoolKind:
		m.Set(fd, protoreflect.ValueOfBool(!v.Bool()))
	case protoreflect.Int32Kind:
		m.Set(fd, protoreflect.ValueOfInt32(int32(v.Int())+1000))
	case protoreflect.StringKind:
		m.Set(fd, protoreflect.ValueOfString(v.String()+"x"))
	default:
		t.Fatalf("%s: kind %v not handled here", fd.FullName(), fd.Kind())
	}
}

// unfilled fails for every leaf of v that is zero and not listed.
func unfilled(t *testing.T, v any, allowed []string) {
	t.Helper()
	var zero []string
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				zero = append(zero, path)
				return
			}
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[kmsg.Tags]() {
				if tags := v.Interface().(kmsg.Tags); tags.Len() == 0 {
					zero = append(zero, path)
				}
				return
			}
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					walk(fieldPath(path, f.Name), v.Field(i))
				}
			}
		case reflect.Slice:
			if v.Len() == 0 {
				zero = append(zero, path)
				return
			}
			if k := v.Type().Elem().Kind(); k == reflect.Struct || k == reflect.Pointer {
				walk(path+"[0]", v.Index(0))
			}
		default:
			if v.IsZero() {
				zero = append(zero, path)
			}
		}
	}
	walk("", reflect.ValueOf(v))
	sort.Strings(zero)
	want := slices.Sorted(slices.Values(allowed))
	if !slices.Equal(zero, want) {
		t.Errorf("Kafka answer fields not filled: %v, want %v", zero, want)
	}
}

func fieldPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
