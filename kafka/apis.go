package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type handlerFunc func(ctx context.Context, r *request, req kmsg.Request) kmsg.Response

type apiSpec struct {
	min, max int16
	fn       handlerFunc
}

type apiVersion struct{ key, min, max int16 }

// handle adapts a typed handler to handlerFunc.
func handle[R kmsg.Request](fn func(context.Context, *request, R) kmsg.Response) handlerFunc {
	return func(ctx context.Context, r *request, req kmsg.Request) kmsg.Response {
		return fn(ctx, r, req.(R))
	}
}

// apiTable lists every API the listener serves with its version range; it is
// also what ApiVersions advertises.
func (l *Listener) apiTable() (map[int16]apiSpec, []apiVersion) {
	m := map[int16]apiSpec{
		0:  {0, 9, handle(l.produce)},
		1:  {0, 12, handle(l.fetch)},
		2:  {0, 7, handle(l.listOffsets)},
		3:  {0, 12, handle(l.metadata)},
		8:  {0, 9, handle(l.offsetCommit)},
		9:  {0, 9, handle(l.offsetFetch)},
		10: {0, 4, handle(l.findCoordinator)},
		11: {0, 9, handle(l.joinGroup)},
		12: {0, 4, handle(l.heartbeat)},
		13: {0, 5, handle(l.leaveGroup)},
		14: {0, 5, handle(l.syncGroup)},
		15: {0, 5, handle(l.describeGroups)},
		16: {0, 5, handle(l.listGroups)},
		18: {0, 3, nil}, // answered in dispatch for every version
		19: {0, 7, handle(l.createTopics)},
		20: {0, 6, handle(l.deleteTopics)},
		42: {0, 2, handle(l.deleteGroups)},
		47: {0, 0, handle(l.offsetDelete)},
	}
	var vs []apiVersion
	for k, s := range m {
		vs = append(vs, apiVersion{k, s.min, s.max})
	}
	slices.SortFunc(vs, func(a, b apiVersion) int { return int(a.key) - int(b.key) })
	return m, vs
}

// apiVersions answers ApiVersions at any version: an unsupported version gets
// a v0 answer with UNSUPPORTED_VERSION and the full list, as Kafka does, so
// the client can retry with a version both sides know.
func (l *Listener) apiVersions(version int16) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(version)
	if version < 0 || version > l.apis[18].max {
		resp.SetVersion(0)
		resp.ErrorCode = errUnsupportedVersion
	}
	for _, v := range l.version {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = v.key, v.min, v.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	if l.cfg.ExclusiveOwnership && resp.GetVersion() >= 3 {
		f := kmsg.NewApiVersionsResponseSupportedFeature()
		f.Name, f.MinVersion, f.MaxVersion = FeatureExclusiveOwnership, 1, 1
		resp.SupportedFeatures = append(resp.SupportedFeatures, f)
	}
	return resp
}
