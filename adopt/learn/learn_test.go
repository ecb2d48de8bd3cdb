package learn

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

func needy(t *testing.T) (Config, string) {
	t.Helper()
	node := testenv.RequireCommand(t, "node")
	script, _ := filepath.Abs("testdata/needy.js")
	root, _ := filepath.EvalSymlinks(t.TempDir())
	ws := filepath.Join(root, "ws")
	os.Mkdir(ws, 0o755)
	reqs, err := probe.ParseScript([]byte(`{"method":"tools/call","params":{"name":"host_info","arguments":{}}}
{"method":"tools/call","params":{"name":"note","arguments":{"file":"n.txt","text":"hello"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	return Config{Mcpwarden: testenv.Mcpwarden(t), Command: []string{node, script, ws}, Dir: root, Environ: os.Environ(),
		Base: root, Paths: []string{ws}, Script: reqs, StateDir: filepath.Join(root, "state"), Timeout: 3 * time.Minute}, ws
}

// TestLearnWithoutDaemon: the fence's refusals at start-up are learned one
// by one; without the kernel view the proposal says what it cannot know.
func TestLearnWithoutDaemon(t *testing.T) {
	c, _ := needy(t)
	p, err := Learn(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rounds) != 2 || p.Rounds[0].Denied != "/etc/passwd" || !p.Rounds[1].Started || !p.Started {
		t.Fatalf("rounds %+v", p.Rounds)
	}
	if len(p.Runtime) != 1 || p.Runtime[0].Flag != "--allow-runtime /etc/passwd" {
		t.Errorf("runtime %+v", p.Runtime)
	}
	if p.Kernel.Used || !strings.Contains(p.Kernel.Note, "no daemon") {
		t.Errorf("kernel %+v", p.Kernel)
	}
	if len(p.Enforce) != 2 || p.Enforce[0].OK || len(p.Audit) != 2 || !p.Audit[0].OK || !p.Audit[1].OK {
		t.Errorf("script: enforce %+v audit %+v", p.Enforce, p.Audit)
	}
	if len(p.Tools) != 2 || p.Tools[0].Name != "host_info" || p.Tools[0].Class != "" || len(p.Scope) == 0 {
		t.Errorf("tools %+v scope %s", p.Tools, p.Scope)
	}
	s := Summary(p, "x.json")
	for _, w := range []string{"could not start, the fence denied /etc/passwd", "Kernel view (audit mode): none", "REVIEW: suggested \"read\"", "Nothing was changed"} {
		if !strings.Contains(s, w) {
			t.Errorf("summary lacks %q:\n%s", w, s)
		}
	}
}

// TestLearnWithDaemon: under the real daemon's kernel view, what the
// server read during a call outside its profile is named (with the symlink
// it went through), its write in the workspace makes the scope a write
// scope, and the session runs under the fence with the proposal.
func TestLearnWithDaemon(t *testing.T) {
	testenv.RequireRoot(t)
	c, ws := needy(t)
	root := c.Base
	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := stream.Ensure(context.Background(), js, stream.Config{}); err != nil {
		t.Fatal(err)
	}
	dstate := filepath.Join(root, "dstate")
	socket := filepath.Join(root, "run", "daemon.sock")
	dlog := &testenv.LockedBuffer{}
	pintest.Unload(t, dstate)
	d := exec.Command(c.Mcpwarden, "daemon", "--socket", socket, "--nats", ns.ClientURL(), "--state-dir", dstate, "--no-crosscheck")
	d.Stderr = dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { d.Process.Signal(os.Interrupt); d.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(dlog.String(), "daemon started"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", dlog.String())
		}
	}
	key, err := os.ReadFile(filepath.Join(dstate, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schema.NewPathHasher(key)
	c.DaemonSocket, c.Hasher, c.PathKey, c.Home = socket, h, filepath.Join(dstate, "path.key"), root
	c.Events = func(ctx context.Context, runID string, since time.Time) ([]schema.Event, error) {
		cons, err := js.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
		if err != nil {
			return nil, err
		}
		var out []schema.Event
		for {
			msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
			if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			evs, _, _ := stream.DecodeBatch(msg.Subject(), msg.Data())
			for _, e := range evs {
				if e.RunID == runID {
					out = append(out, e)
				}
			}
		}
	}
	p, err := Learn(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Kernel.Used || p.Kernel.RunID == "" || p.Kernel.FileOps == 0 {
		t.Fatalf("kernel view %+v\ndaemon:\n%s", p.Kernel, dlog.String())
	}
	var flags []string
	for _, g := range p.Runtime {
		flags = append(flags, g.Flag)
	}
	real, _ := filepath.EvalSymlinks("/etc/os-release")
	for _, want := range []string{"--allow-runtime /etc/passwd", "--allow-runtime " + real} {
		if !slices.Contains(flags, want) {
			t.Errorf("proposed %q, want %q among them (kernel %+v)", flags, want, p.Kernel)
		}
	}
	if real != "/etc/os-release" && !slices.Contains(flags, "--allow-runtime /etc/os-release") {
		t.Errorf("the symlink the server opened the file by is not proposed: %q", flags)
	}
	if !p.NeedsWrite || !strings.Contains(string(p.Scope), `"access_mode": "write"`) {
		t.Errorf("the write in %s was not learned: needs write %v, scope %s", ws, p.NeedsWrite, p.Scope)
	}
	if len(p.Verified) != 2 || !p.Verified[1].OK {
		t.Errorf("the session with the proposal: %+v", p.Verified)
	}
}
