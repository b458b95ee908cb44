package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/actors"
)

// chromium renders url in headless Chromium and returns the DOM after its
// scripts ran (there are none: the page is server-rendered); with shot set
// it also writes a screenshot there.
func chromium(t *testing.T, url, shot string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make deps installs Debian's chromium package)")
	}
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1000"}
	if shot != "" {
		out, err := exec.Command(bin, append(args, "--screenshot="+shot, url)...).CombinedOutput()
		if err != nil {
			t.Fatalf("chromium screenshot: %v\n%s", err, out)
		}
	}
	var stderr strings.Builder
	cmd := exec.Command(bin, append(args, "--dump-dom", url)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// consumer is a franz-go group member that keeps polling until closed.
func consumer(t *testing.T, addr, group, topic, client string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID(client), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(200*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for cl.Context().Err() == nil {
			ctx, cancel := context.WithTimeout(cl.Context(), 200*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
	}()
	return cl
}

// waitGroup waits until the node's view of group is Stable at generation
// gen or later with n members.
func waitGroup(t *testing.T, nd *Node, group string, gen int32, members int) actors.GroupView {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, ok := nd.observer.Group(group)
		if ok && g.State == "Stable" && g.Generation >= gen && len(g.Members) == members {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: %+v, want Stable generation %d with %d members", group, g, gen, members)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var rebalanceRe = regexp.MustCompile(`class="rebalance" data-generation="(\d+)" data-cause="(\w+)"`)

// The status page in a real browser: it shows the cluster and a group two
// franz-go consumers formed, and the group's timeline gains a generation,
// caused by a leave, when one of them leaves.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	nd := startNode(t, false, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	addr := nd.KafkaAddr()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ct := kmsg.NewPtrCreateTopicsRequest()
	tt := kmsg.NewCreateTopicsRequestTopic()
	tt.Topic, tt.NumPartitions, tt.ReplicationFactor = "orders", 4, 1
	ct.Topics = append(ct.Topics, tt)
	if _, err := ct.RequestWith(context.Background(), admin); err != nil {
		t.Fatal(err)
	}
	a := consumer(t, addr, "billing", "orders", "billing-a")
	defer a.Close()
	b := consumer(t, addr, "billing", "orders", "billing-b")
	g := waitGroup(t, nd, "billing", 1, 2)
	base := "http://" + nd.HTTPAddr()

	page := chromium(t, base+"/", "")
	for _, want := range []string{"cohort node node1", `id="groups"`, `href="/groups/billing"`, "Stable", "range"} {
		if !strings.Contains(page, want) {
			t.Fatalf("overview lacks %q:\n%s", want, page)
		}
	}
	before := rebalanceRe.FindAllStringSubmatch(chromium(t, base+"/groups/billing", ""), -1)
	if len(before) == 0 || before[0][2] != "join" {
		t.Fatalf("timeline before the leave: %v", before)
	}
	gen := g.Generation

	b.Close() // leaves the group
	waitGroup(t, nd, "billing", gen+1, 1)
	shot := filepath.Join(t.TempDir(), "group.png")
	if dir := os.Getenv("COHORT_SCREENSHOT_DIR"); dir != "" {
		shot = filepath.Join(dir, "status-group.png")
	}
	page = chromium(t, base+"/groups/billing", shot)
	after := rebalanceRe.FindAllStringSubmatch(page, -1)
	if len(after) != len(before)+1 {
		t.Fatalf("timeline has %d generations after the leave, want %d:\n%s", len(after), len(before)+1, page)
	}
	last := after[len(after)-1]
	if last[1] != fmt.Sprint(gen+1) || last[2] != "leave" {
		t.Fatalf("last generation on the timeline: %v, want %d caused by leave", last, gen+1)
	}
	if !strings.Contains(page, "billing-a") || !strings.Contains(page, "orders: 0,1,2,3") {
		t.Fatalf("the remaining member and its assignment are missing:\n%s", page)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
}
