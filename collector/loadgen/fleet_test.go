package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// fleet is a simulated fleet's infrastructure: one NATS server with
// JetStream whose users are every simulated host (each allowed its own
// subjects only) and the collectors, and collector processes of the real
// binary.
type fleet struct {
	url, seeds string
	hosts      []Host
	// collectorArgs are the collectors' NATS credential flags.
	collectorArgs []string
}

// collectorUser names the collectors' user in the seeds directory.
const collectorUser = "role-collector"

// startFleetNATS starts an embedded nats-server (the Go server the daemon
// embeds) on a free loopback port from a configuration file in
// deploy/nats's shape: one account with JetStream, whose users are every
// host's nkey user as UsersConf writes them and one for the collectors.
func startFleetNATS(tb testing.TB, names []string) *fleet {
	tb.Helper()
	dir := tb.TempDir()
	seeds := filepath.Join(dir, "seeds")
	pubs, err := HostSeeds(seeds, names)
	if err != nil {
		tb.Fatal(err)
	}
	coll, err := HostSeeds(seeds, []string{collectorUser})
	if err != nil {
		tb.Fatal(err)
	}
	cp := stream.CollectorPermissions()
	conf := fmt.Sprintf(`server_name: loadgen
listen: 127.0.0.1:-1
jetstream { store_dir: %q, max_file_store: 20G }
accounts {
  MCPWARDEN: {
    jetstream: enabled
    users: [
%s
{ nkey: %s, permissions: { publish: { allow: %s }, subscribe: { allow: %s } } }
    ]
  }
}
`, filepath.Join(dir, "js"), UsersConf(pubs), coll[collectorUser], confList(cp.PublishAllow), confList(cp.SubscribeAllow))
	file := filepath.Join(dir, "nats.conf")
	testenv.WriteFiles(tb, map[string]string{file: conf})
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		tb.Fatalf("nats-server refuses the configuration: %v\n%s", err, conf)
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	go ns.Start()
	tb.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(60 * time.Second) {
		tb.Fatal("NATS server not ready within 60 s")
	}
	return &fleet{url: ns.ClientURL(), seeds: seeds, hosts: Hosts(ns.ClientURL(), seeds, names),
		collectorArgs: []string{"--nats-nkey", SeedFile(seeds, collectorUser)}}
}

// startCollectors migrates dsn (with migrate's extra flags) and starts n
// `mcpwarden collect` processes with the default flags, but without the
// cross-check (its findings would be rows nobody produced), until the
// test ends.
func (f *fleet) startCollectors(tb testing.TB, dsn string, n int, migrate ...string) []*testenv.LockedBuffer {
	tb.Helper()
	bin := testenv.Mcpwarden(tb)
	if out, err := exec.Command(bin, append([]string{"collect", "--migrate-only", "--clickhouse", dsn}, migrate...)...).CombinedOutput(); err != nil {
		tb.Fatalf("collect --migrate-only: %v\n%s", err, out)
	}
	var logs []*testenv.LockedBuffer
	for i := 0; i < n; i++ {
		args := append([]string{"collect", "--nats", f.url, "--clickhouse", dsn, "--no-crosscheck"}, f.collectorArgs...)
		logs = append(logs, startProcess(tb, "collecting", bin, args...))
	}
	return logs
}

// startProcess starts name with args until the test ends (interrupted,
// then waited for) and waits up to 2 minutes for ready in its output.
func startProcess(tb testing.TB, ready, name string, args ...string) *testenv.LockedBuffer {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	var out testenv.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	// A benchmark that times out (its panic skips the cleanups) takes its
	// collectors with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("%s %s:\n%s", filepath.Base(name), args[0], out.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), ready) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s %s not ready within 2 minutes:\n%s", name, args[0], out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &out
}

func openStore(tb testing.TB, dsn string) *store.Store {
	tb.Helper()
	st, err := store.Open(context.Background(), dsn, false, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// TestFleetProducedEqualsStored simulates a few hosts, each publishing with
// its own credentials through the real publisher into NATS, collected by
// two real collector processes into ClickHouse, and checks run by run that
// what was produced is what is stored, each event once.
func TestFleetProducedEqualsStored(t *testing.T) {
	dsn := chtest.Database(t)
	names := HostNames("lg-"+schema.NewID()[:6], 5)
	f := startFleetNATS(t, names)
	f.startCollectors(t, dsn, 2)
	mix := DefaultMix
	mix.DenyEvery = 2
	mix.HealthEvery = time.Millisecond // a health event with every step's batch: every kind is produced
	rep, err := Run(context.Background(), Config{Hosts: f.hosts, RunsPerHost: 4, Mix: mix, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 20 || rep.Refused != 0 {
		t.Fatalf("runs %d (want 20), refused %d", rep.Runs, rep.Refused)
	}
	perRun := uint64(3 + mix.RuntimeOps + 1 + mix.Calls*(1+mix.OpsPerCall))
	for _, h := range names {
		runs := 0
		for k, n := range rep.Produced {
			if k.Host != h || k.Run == "" {
				continue
			}
			runs++
			if n != perRun && n != perRun+4 {
				t.Errorf("run %s of %s produced %d events, want %d or %d (denied)", k.Run, h, n, perRun, perRun+4)
			}
		}
		if runs != 4 || rep.Produced[RunKey{h, ""}] == 0 {
			t.Errorf("host %s: %d runs, %d health events", h, runs, rep.Produced[RunKey{h, ""}])
		}
	}
	for _, k := range []schema.Kind{schema.KindLaunch, schema.KindDecision, schema.KindFileOp, schema.KindLandlockDenial, schema.KindFinding, schema.KindHealth} {
		if rep.ByKind[k] == 0 {
			t.Errorf("no %s events produced: %v", k, rep.ByKind)
		}
	}
	st := openStore(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := WaitStored(ctx, st, rep, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK() || c.Lost() != 0 {
		t.Fatalf("not stored exactly: %s", c)
	}
	lag, err := Lag(context.Background(), st, rep)
	if err != nil {
		t.Fatal(err)
	}
	if lag.P99 < lag.P50 || lag.Max < lag.P99 || lag.Last.Before(lag.First) || lag.First.Before(rep.Start.Add(-lag.Resolution)) {
		t.Errorf("lag figures out of order: %+v (run from %s)", lag, rep.Start)
	}
}

// TestCheckStoredSeesLossAndExtras checks the checker itself: a run short
// of events, a run nobody produced and a duplicate row are each reported.
func TestCheckStoredSeesLossAndExtras(t *testing.T) {
	dsn := chtest.Database(t)
	st, err := store.Open(context.Background(), dsn, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := newHost("check-host")
	if err != nil {
		t.Fatal(err)
	}
	mix := Mix{RuntimeOps: 3, Calls: 2, OpsPerCall: 1}
	var evs []schema.Event
	rep := &Report{Produced: map[RunKey]uint64{}}
	for range 3 {
		r := h.newRun(mix)
		for i := 0; i < r.steps(); i++ {
			for _, e := range r.step(i, time.Now()) {
				evs = append(evs, e)
				rep.Produced[RunKey{e.Host, e.RunID}]++
				rep.Events++
			}
		}
	}
	if err := st.Insert(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	c, err := CheckStored(context.Background(), st, rep)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK() {
		t.Fatalf("exact store judged wrong: %s", c)
	}
	// One event of the first run lost, one duplicated, a run nobody produced.
	lost := evs[0]
	rep.Produced[RunKey{lost.Host, lost.RunID}]++
	rep.Events++
	extra := h.newRun(mix).step(0, time.Now())
	if err := st.Insert(context.Background(), append([]schema.Event{evs[1]}, extra...)); err != nil {
		t.Fatal(err)
	}
	c, err = CheckStored(context.Background(), st, rep)
	if err != nil {
		t.Fatal(err)
	}
	if c.OK() || c.MissingRuns != 1 || c.ExtraRuns != 1 || c.Rows != c.Distinct+1 || c.Lost() != 1-int64(len(extra)) {
		t.Fatalf("loss, extra run and duplicate not all seen: %+v", c)
	}
}

// TestHostCannotPublishAsAnother: the credentials a simulated host is given
// let it publish under its own subject token only.
func TestHostCannotPublishAsAnother(t *testing.T) {
	names := []string{"lg-a", "lg-b"}
	f := startFleetNATS(t, names)
	nc, v := natstest.Connect(t, f.hosts[0].NATS)
	other := stream.Subject("lg-b", schema.KindFileOp)
	if err := nc.Publish(other, []byte("x")); err != nil {
		t.Fatal(err)
	}
	v.Wait(t, other)
	if err := nc.Publish(stream.Subject("lg-a", schema.KindFileOp), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestMixEventsAreValid: every event of every step of a run, denied or not,
// and the health event pass the schema's validation, and a run has the
// number of events EventsPerRun counts.
func TestMixEventsAreValid(t *testing.T) {
	for _, m := range []Mix{DefaultMix, {RuntimeOps: 0, Calls: 0, DenyEvery: 1}, {RuntimeOps: 1, Calls: 3, OpsPerCall: 0, DenyEvery: 2}} {
		t.Run(fmt.Sprintf("%+v", m), func(t *testing.T) {
			h, err := newHost("mix-host")
			if err != nil {
				t.Fatal(err)
			}
			var total int
			runs := max(m.DenyEvery, 1) * 2
			for range runs {
				r := h.newRun(m)
				kinds := map[schema.Kind]int{}
				for i := 0; i < r.steps(); i++ {
					for _, e := range r.step(i, time.Now()) {
						if err := e.Validate(); err != nil {
							t.Fatalf("step %d: %v: %+v", i, err, e)
						}
						if e.RunID != r.id || e.Host != "mix-host" {
							t.Fatalf("event of another run or host: %+v", e)
						}
						kinds[e.Kind]++
						total++
					}
				}
				if kinds[schema.KindLaunch] != 3 || kinds[schema.KindDecision] != 1+m.Calls+map[bool]int{true: 1}[r.denied] {
					t.Errorf("run kinds %v", kinds)
				}
			}
			if want := m.EventsPerRun() * float64(runs); float64(total) != want {
				t.Errorf("%d events in %d runs, EventsPerRun says %v", total, runs, want)
			}
			hl := h.health(time.Now())
			if err := hl.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestConfigRefused(t *testing.T) {
	ok := Config{Hosts: []Host{{Name: "a"}}, RunsPerHost: 1, SpoolDir: "/x", Mix: DefaultMix}
	cases := map[string]func(*Config){
		"no hosts":      func(c *Config) { c.Hosts = nil },
		"no end":        func(c *Config) { c.RunsPerHost = 0 },
		"negative rate": func(c *Config) { c.Rate = -1 },
		"no spool":      func(c *Config) { c.SpoolDir = "" },
		"twice":         func(c *Config) { c.Hosts = []Host{{Name: "a"}, {Name: "a"}} },
		"bad host":      func(c *Config) { c.Hosts = []Host{{Name: "a b"}} },
		"bad mix":       func(c *Config) { c.Mix.Calls = -1 },
	}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for name, mut := range cases {
		c := ok
		mut(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLettersAreDistinct(t *testing.T) {
	seen := map[string]int{}
	for i := range 20_000 {
		l := letters(i)
		if j, ok := seen[l]; ok {
			t.Fatalf("letters(%d) = letters(%d) = %q", i, j, l)
		}
		seen[l] = i
		for _, c := range l {
			if c < 'a' || c > 'z' {
				t.Fatalf("letters(%d) = %q", i, l)
			}
		}
	}
}

// TestSimulate runs the command's path: seeds created on demand, the
// hosts publish, the store is waited for and checked, the summary printed.
func TestSimulate(t *testing.T) {
	dsn := chtest.Database(t)
	prefix := "sim-" + schema.NewID()[:6]
	names := HostNames(prefix, 3)
	f := startFleetNATS(t, names)
	f.startCollectors(t, dsn, 1)
	var out strings.Builder
	o := Options{NATSURL: f.url, SeedDir: f.seeds, Hosts: 3, HostPrefix: prefix, Runs: 2, Mix: DefaultMix,
		ClickHouseDSN: dsn, Wait: 5 * time.Minute, JSON: true}
	s, err := Simulate(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	var got Summary
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, out.String())
	}
	if got.Runs != 6 || got.Stored == nil || !got.Stored.OK || got.Stored.Distinct != s.Produced || got.Stored.Lost != 0 || got.Produced == 0 {
		t.Fatalf("summary: %s", out.String())
	}
	// A host whose seed is missing is refused unless seeds may be created.
	o.Hosts = 4
	if _, err := Simulate(context.Background(), o, io.Discard); err == nil || !strings.Contains(err.Error(), "no seed") {
		t.Fatalf("a host without a seed: %v", err)
	}
}

func TestUsersConfGivesEachHostItsOwnSubjects(t *testing.T) {
	pubs := map[string]string{"h-1": "UAAA", "h-2": "UBBB"}
	conf := UsersConf(pubs)
	for h, k := range pubs {
		line := ""
		for _, l := range strings.Split(conf, "\n") {
			if strings.Contains(l, k) {
				line = l
			}
		}
		if !strings.Contains(line, `"mcpwarden.v1.`+h+`.file_op"`) || strings.Contains(line, `"mcpwarden.v1.`+h+`.>"`) || strings.Contains(line, "STREAM.CREATE") {
			t.Errorf("user of %s: %s", h, line)
		}
		for o := range pubs {
			if o != h && strings.Contains(line, "mcpwarden.v1."+o+".") {
				t.Errorf("user of %s may publish as %s: %s", h, o, line)
			}
		}
	}
}
