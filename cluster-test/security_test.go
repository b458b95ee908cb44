package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/security"
)

// TestSecurityReplicated: on three cohortd processes with SASL listeners and
// the authorizer, a user and an ACL created through a follower (forwarded
// to the leader) work on every node, and every node converges on the same
// state (FSM hash).
func TestSecurityReplicated(t *testing.T) {
	skipShort(t)
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("admin:admin-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := StartCluster(t, 3, func(o *Options) {
		o.Args = append(o.Args, "--listeners", "SASL_PLAINTEXT://127.0.0.1:0", "--authorizer",
			"--super-users", "User:admin", "--scram-users-file", users)
	})
	leader := c.WaitLeader(20 * time.Second)
	var followers []*Node
	for _, n := range c.Running() {
		if n != leader {
			followers = append(followers, n)
		}
	}
	client := func(n *Node, user, pass string) *kadm.Client {
		m, err := security.ClientMechanism(security.MechanismScramSHA512, user, pass)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr), kgo.SASL(m), kgo.RequestRetries(2))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	ctx := context.Background()
	eventually := func(what string, f func() error) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = f(); err == nil {
				return
			}
		}
		t.Fatalf("%s: %v", what, err)
	}
	// The leader created admin from the users file.
	adm := client(followers[0], "admin", "admin-pw")
	eventually("admin logs in through a follower", func() error { _, err := adm.ListBrokers(ctx); return err })
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "bob-pw"}})
	if err != nil || res.Error() != nil {
		t.Fatalf("create bob through a follower: %v %v", err, res.Error())
	}
	acl := kadm.NewACLs().Groups("bob-").ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:bob").AllowHosts("*").Operations(kadm.OpRead)
	if r, err := adm.CreateACLs(ctx, acl); err != nil || r[0].Err != nil {
		t.Fatalf("acl through a follower: %v %+v", err, r)
	}
	for _, n := range c.Running() {
		bob := client(n, "bob", "bob-pw")
		eventually("bob describes his group through "+n.ID, func() error {
			d, err := bob.DescribeGroups(ctx, "bob-app")
			if err != nil {
				return err
			}
			// bob-app has no members yet: Kafka answers a group that does
			// not exist GROUP_ID_NOT_FOUND from DescribeGroups v6, and
			// only to a caller allowed to describe it.
			if err := d["bob-app"].Err; !errors.Is(err, kerr.GroupIDNotFound) {
				return fmt.Errorf("want GROUP_ID_NOT_FOUND, got %v", err)
			}
			return nil
		})
		// FindCoordinator already refuses (DESCRIBE on the group).
		d, err := bob.DescribeGroups(ctx, "alice-app")
		if err == nil {
			err = d["alice-app"].Err
		}
		if !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("bob on alice's group through %s: %v", n.ID, err)
		}
	}
	c.WaitConverged(30 * time.Second)
}
