package kafka

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/security"
)

func (l *Listener) describeGroups(ctx context.Context, r *request, req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(req.Groups))
	parallel(len(req.Groups), func(i int) {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = req.Groups[i]
		if !r.groupAllowed(kmsg.ACLOperationDescribe, g.Group) {
			g.ErrorCode = groupDenied
			resp.Groups[i] = g
			return
		}
		if r.version >= 3 && req.IncludeAuthorizedOperations {
			g.AuthorizedOperations = r.groupOperations(g.Group)
		}
		version := int32(r.version)
		out, err := call[*grouppb.DescribeGroupResponse](ctx, l, callTimeout, &grouppb.DescribeGroupRequest{GroupId: req.Groups[i], ApiVersion: &version})
		if err != nil {
			g.ErrorCode = callErrorCode(err)
			resp.Groups[i] = g
			return
		}
		g.ErrorCode = int16(out.ErrorCode)
		if r.version >= 6 && out.ErrorMessage != "" {
			msg := out.ErrorMessage
			g.ErrorMessage = &msg
		}
		g.State, g.ProtocolType, g.Protocol = out.State, out.ProtocolType, out.ProtocolData
		for _, m := range out.Members {
			km := kmsg.NewDescribeGroupsResponseGroupMember()
			km.MemberID, km.InstanceID, km.ClientID, km.ClientHost = m.MemberId, m.GroupInstanceId, m.ClientId, m.ClientHost
			km.ProtocolMetadata, km.MemberAssignment = m.Metadata, m.Assignment
			g.Members = append(g.Members, km)
		}
		if out.ErrorCode == 0 {
			g.UnknownTags.Set(GenerationTag, appendGeneration(nil, out.GenerationId))
		}
		resp.Groups[i] = g
	})
	return resp
}

func (l *Listener) listGroups(ctx context.Context, r *request, req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrListGroupsResponse()
	n := &grouppb.ListGroupsRequest{}
	if r.version >= 4 {
		n.StatesFilter = req.StatesFilter
	}
	if r.version >= 5 {
		n.TypesFilter = req.TypesFilter
	}
	out, err := call[*grouppb.ListGroupsResponse](ctx, l, callTimeout, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	all := r.may(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeCluster, security.ClusterName)
	for _, g := range out.Groups {
		if !all && !r.may(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeGroup, g.GroupId) {
			continue // Kafka leaves out what the caller may not describe
		}
		kg := kmsg.NewListGroupsResponseGroup()
		kg.Group, kg.ProtocolType, kg.GroupState, kg.GroupType = g.GroupId, g.ProtocolType, g.State, g.GroupType
		resp.Groups = append(resp.Groups, kg)
	}
	return resp
}

func (l *Listener) deleteGroups(ctx context.Context, r *request, req *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.Groups = make([]kmsg.DeleteGroupsResponseGroup, len(req.Groups))
	parallel(len(req.Groups), func(i int) {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = req.Groups[i]
		if !r.groupAllowed(kmsg.ACLOperationDelete, g.Group) {
			g.ErrorCode = groupDenied
			resp.Groups[i] = g
			return
		}
		out, err := call[*grouppb.DeleteGroupResponse](ctx, l, callTimeout, &grouppb.DeleteGroupRequest{GroupId: req.Groups[i]})
		if err != nil {
			g.ErrorCode = callErrorCode(err)
		} else {
			g.ErrorCode = int16(out.ErrorCode)
		}
		resp.Groups[i] = g
	})
	return resp
}

// parallel runs fn(0..n-1) with at most describeParallel at once.
func parallel(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, describeParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// appendGeneration encodes a generation as the GenerationTag payload: a
// big-endian int32.
func appendGeneration(dst []byte, gen int32) []byte {
	return append(dst, byte(gen>>24), byte(gen>>16), byte(gen>>8), byte(gen))
}

// GenerationFromTags decodes the generation a cohort listener reports in a
// DescribeGroups v5+ group entry; ok is false for other brokers.
func GenerationFromTags(tags kmsg.Tags) (gen int32, ok bool) {
	tags.Each(func(key uint32, val []byte) {
		if key == GenerationTag && len(val) == 4 {
			gen = int32(uint32(val[0])<<24 | uint32(val[1])<<16 | uint32(val[2])<<8 | uint32(val[3]))
			ok = true
		}
	})
	return gen, ok
}
