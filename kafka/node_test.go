package kafka_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/kafka"
)

// TestWalkAgainstNode sends every advertised API version to a real node
// (coordinator + listener) and checks that each answer decodes at that
// version and carries no UNSUPPORTED_VERSION or UNKNOWN_SERVER_ERROR.
func TestWalkAgainstNode(t *testing.T) {
	n := testnode.Start(t, testnode.Config(t))
	nc, err := net.Dial("tcp", n.KafkaAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("walk"))
	var corr int32
	do := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		corr++
		if _, err := nc.Write(fm.AppendRequest(nil, req, corr)); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); err != nil {
			t.Fatalf("%s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(br, frame); err != nil {
			t.Fatal(err)
		}
		if got := int32(binary.BigEndian.Uint32(frame)); got != corr {
			t.Fatalf("correlation %d, want %d", got, corr)
		}
		body := frame[4:]
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		if resp.IsFlexible() && req.Key() != 18 {
			body = body[1:]
		}
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("%s v%d: decode: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
		}
		return resp
	}
	av := do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse)
	walked, seen := 0, map[int16]bool{}
	for _, k := range av.ApiKeys {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			req := kafka.SampleRequest(k.ApiKey, v)
			req.SetVersion(v)
			switch r := req.(type) {
			case *kmsg.JoinGroupRequest:
				r.Group = fmt.Sprintf("walk-join-%d", v) // a fresh group: the join completes at once
			case *kmsg.ConsumerGroupHeartbeatRequest:
				r.Group = fmt.Sprintf("walk-consumer-%d", v) // a consumer group, not the classic "g"
			}
			resp := do(req)
			for _, code := range errorCodes(reflect.ValueOf(resp)) {
				seen[code] = true
				if code == 35 || code == -1 {
					t.Errorf("%s v%d: error code %d in %+v", kmsg.NameForKey(k.ApiKey), v, code, resp)
				}
			}
			walked++
		}
	}
	if walked < 120 {
		t.Fatalf("walked %d versions", walked)
	}
	// The walk reaches the coordinator: v4+ joins are told to come back with
	// a member id, and the unknown partition of the sample commit is refused.
	if !seen[79] || !seen[3] {
		t.Fatalf("error codes seen: %v", seen)
	}
}

// errorCodes collects every ErrorCode field in a response.
func errorCodes(v reflect.Value) []int16 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return errorCodes(v.Elem())
	case reflect.Slice:
		var out []int16
		if v.Type().Elem().Kind() == reflect.Struct {
			for i := range v.Len() {
				out = append(out, errorCodes(v.Index(i))...)
			}
		}
		return out
	case reflect.Struct:
		var out []int16
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				out = append(out, int16(f.Int()))
				continue
			}
			if f.CanInterface() && (f.Kind() == reflect.Slice || f.Kind() == reflect.Struct) {
				out = append(out, errorCodes(f)...)
			}
		}
		return out
	}
	return nil
}
