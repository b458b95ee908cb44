package member_test

import (
	"context"
	"log"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
)

// The example of docs/member-library.md: one member of group "orders" against a cohortd
// started with its defaults (compiled, not run).
func ExampleStart() {
	system := actor.NewActorSystem()
	remote.NewRemote(system, remote.Configure("127.0.0.1", 8100)).Start() // the native API answers through it
	m, err := member.Start(system, "orders",
		member.Topics("orders"), member.Partitions("orders", 12), // the native API has no topic metadata
		member.Bootstrap("127.0.0.1:8090"), // cohortd --remote-addr (the default)
		member.OnAssigned(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { /* start */ }),
		member.OnRevoked(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { /* finish, m.Commit */ }),
		member.OnLost(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { /* stop at once */ }))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Mark("orders", 3, 42)                // commit with m.Commit(ctx, nil), m.CommitAsync, or at Close
	err = m.EnforceRebalance("scaling up") // KIP-568; keeps what a cooperative member owns
	err = m.Close(ctx)                     // revoke, commit what is marked, leave
	_ = err
}

// A member of the consumer group protocol (KIP-848): the coordinator
// assigns, with the server assignor named here (compiled, not run).
func ExampleConsumerProtocol() {
	system := actor.NewActorSystem()
	remote.NewRemote(system, remote.Configure("127.0.0.1", 8100)).Start()
	m, err := member.Start(system, "orders",
		member.ConsumerProtocol(), member.ServerAssignor("uniform"),
		member.Topics("orders"), // no Partitions: the coordinator knows the topics
		member.Bootstrap("127.0.0.1:8090"),
		member.OnAssigned(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { /* start */ }),
		member.OnRevoked(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) {
			/* finish, m.Commit: the coordinator hands ps to others once this returned */
		}),
		member.OnLost(func(ctx context.Context, m *member.Member, ps []assignor.TopicPartitions) { /* stop at once */ }))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.GroupProtocol()                  // "consumer", or "classic" where the coordinator does not serve it
	err = m.EnforceRebalance("scaling up") // member.ErrUnsupported: the coordinator rebalances on its own
	err = m.Close(ctx)                     // revoke, commit what is marked, leave (epoch -1; -2 when static)
	_ = err
}
