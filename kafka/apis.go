package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
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
		kmsg.Produce.Int16():          {0, 9, handle(l.produce)},
		kmsg.Fetch.Int16():            {0, 12, handle(l.fetch)},
		kmsg.ListOffsets.Int16():      {0, 7, handle(l.listOffsets)},
		kmsg.Metadata.Int16():         {0, 12, handle(l.metadata)},
		kmsg.OffsetCommit.Int16():     {0, 9, nil}, // sent to the groups by the reader (conn.send)
		kmsg.OffsetFetch.Int16():      {0, 9, handle(l.offsetFetch)},
		kmsg.FindCoordinator.Int16():  {0, 4, handle(l.findCoordinator)},
		kmsg.JoinGroup.Int16():        {0, 9, nil}, // sent, as OffsetCommit
		kmsg.Heartbeat.Int16():        {0, 4, handle(l.heartbeat)},
		kmsg.LeaveGroup.Int16():       {0, 5, handle(l.leaveGroup)},
		kmsg.SyncGroup.Int16():        {0, 5, nil}, // sent, as OffsetCommit
		kmsg.DescribeGroups.Int16():   {0, 6, handle(l.describeGroups)},
		kmsg.ListGroups.Int16():       {0, 5, handle(l.listGroups)},
		kmsg.ApiVersions.Int16():      {0, 3, nil}, // answered in dispatch for every version
		kmsg.CreateTopics.Int16():     {0, 7, handle(l.createTopics)},
		kmsg.DeleteTopics.Int16():     {0, 6, handle(l.deleteTopics)},
		kmsg.CreatePartitions.Int16(): {0, 3, handle(l.createPartitions)},
		kmsg.DeleteGroups.Int16():     {0, 2, handle(l.deleteGroups)},
		kmsg.OffsetDelete.Int16():     {0, 0, handle(l.offsetDelete)},
		// SaslHandshake stops at v1 (KAFKA-9577); both are served by the
		// connection while it authenticates (auth.go).
		kmsg.SASLHandshake.Int16():                {0, 1, handle(l.saslHandshake)},
		kmsg.SASLAuthenticate.Int16():             {0, 2, handle(l.saslAuthenticate)},
		kmsg.DescribeACLs.Int16():                 {0, 3, handle(l.describeACLs)},
		kmsg.CreateACLs.Int16():                   {0, 3, handle(l.createACLs)},
		kmsg.DeleteACLs.Int16():                   {0, 3, handle(l.deleteACLs)},
		kmsg.DescribeUserSCRAMCredentials.Int16(): {0, 0, handle(l.describeUserScram)},
		kmsg.AlterUserSCRAMCredentials.Int16():    {0, 0, handle(l.alterUserScram)},
		// Listed whether or not Config.ConsumerProtocol is on (consumer.go).
		kmsg.ConsumerGroupHeartbeat.Int16(): {0, 1, handle(l.consumerGroupHeartbeat)},
		kmsg.ConsumerGroupDescribe.Int16():  {0, 1, handle(l.consumerGroupDescribe)},
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
	if version < 0 || version > l.apis[kmsg.ApiVersions.Int16()].max {
		resp.SetVersion(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
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
	if l.cfg.ConsumerProtocol && resp.GetVersion() >= 3 {
		// Kafka 4's feature for the consumer group protocol, finalized at
		// level 1 as Kafka finalizes it (clients decide from API 68).
		f := kmsg.NewApiVersionsResponseSupportedFeature()
		f.Name, f.MinVersion, f.MaxVersion = featureGroupVersion, 0, 1
		resp.SupportedFeatures = append(resp.SupportedFeatures, f)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = featureGroupVersion, 1, 1
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
		resp.FinalizedFeaturesEpoch = 0
	}
	return resp
}

// featureGroupVersion is Kafka's group.version feature: level 1 enables
// the consumer group protocol (KIP-848).
const featureGroupVersion = "group.version"
