package loadgen

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// benchInt and benchDuration read a knob of the fleet benchmark from the
// environment.
func benchInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func benchDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// startFleetCluster starts natstest's 3-node JetStream cluster (Debian's
// nats-server processes when bin is given, embedded nodes otherwise) with a
// user per host, and the collectors' password file.
func startFleetCluster(tb testing.TB, names []string, bin string) *fleet {
	tb.Helper()
	c := natstest.StartCluster(tb, natstest.ClusterConfig{Hosts: names, Bin: bin})
	pw := filepath.Join(tb.TempDir(), "collector.password")
	testenv.WriteFiles(tb, map[string]string{pw: c.Password(c.User(stream.RoleCollector, ""))})
	if err := os.Chmod(pw, 0o600); err != nil {
		tb.Fatal(err)
	}
	f := &fleet{url: c.URL(), collectorArgs: []string{"--nats-user", c.User(stream.RoleCollector, ""), "--nats-password-file", pw}}
	for _, h := range names {
		f.hosts = append(f.hosts, Host{Name: h, NATS: c.Conn(stream.RoleDaemon, h, "mcpwarden-loadgen@"+h)})
	}
	return f
}

// BenchmarkFleet is the fleet benchmark (`make bench-fleet`): simulated
// hosts publish through the real publisher into NATS, collector processes
// of the real binary (default flags, no cross-check) store into
// ClickHouse; it waits until every produced event is stored, fails unless
// each is stored exactly once, and reports the stored events/s (first
// publish to last insert), the offered rate, and the lag publish → stored
// (p50, p99). Knobs (environment):
//
//	MCPWARDEN_FLEET_HOSTS       simulated hosts (default 100)
//	MCPWARDEN_FLEET_DURATION    how long they publish (default 20s)
//	MCPWARDEN_FLEET_RATE        fleet events/s, 0 = as fast as acknowledged (default 0)
//	MCPWARDEN_FLEET_COLLECTORS  collector counts to run in turn, e.g. 1,2,4 (default 1)
//	MCPWARDEN_FLEET_NATS        cluster (3 nodes of Debian's nats-server, stream R3; default),
//	                            embedded (the same cluster, embedded in the benchmark process),
//	                            single (one embedded server, R1)
//	MCPWARDEN_FLEET_MAX_IN_FLIGHT  unacknowledged messages per host (default 16)
//	MCPWARDEN_FLEET_SHARDS      0 = the test server (MCPWARDEN_CLICKHOUSE_ADDR; default),
//	                            1 or 2 = a private 18.16 cluster of that many shards x 2 replicas
func BenchmarkFleet(b *testing.B) {
	hosts := benchInt("MCPWARDEN_FLEET_HOSTS", 100)
	dur := benchDuration(b, "MCPWARDEN_FLEET_DURATION", 20*time.Second)
	rate, _ := strconv.ParseFloat(os.Getenv("MCPWARDEN_FLEET_RATE"), 64)
	natsShape := os.Getenv("MCPWARDEN_FLEET_NATS")
	if natsShape == "" {
		natsShape = "cluster"
	}
	shards := benchInt("MCPWARDEN_FLEET_SHARDS", 0)
	inFlight := benchInt("MCPWARDEN_FLEET_MAX_IN_FLIGHT", 16)
	counts := []int{1}
	if v := os.Getenv("MCPWARDEN_FLEET_COLLECTORS"); v != "" {
		counts = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				b.Fatalf("MCPWARDEN_FLEET_COLLECTORS=%q: give counts such as 1,2,4", v)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		b.Run("collectors="+strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				fleetRun(b, fleetShape{hosts, dur, rate, natsShape, shards, n, inFlight})
			}
		})
	}
}

// fleetShape is one BenchmarkFleet run's shape.
type fleetShape struct {
	hosts              int
	dur                time.Duration
	rate               float64
	nats               string
	shards, collectors int
	inFlight           int
}

func fleetRun(b *testing.B, sh fleetShape) {
	b.StopTimer()
	hosts, dur, rate, natsShape, shards, collectors := sh.hosts, sh.dur, sh.rate, sh.nats, sh.shards, sh.collectors
	names := HostNames("fl-"+schema.NewID()[:6], hosts)
	var f *fleet
	switch natsShape {
	case "cluster":
		f = startFleetCluster(b, names, natstest.DebianServer(b))
	case "embedded":
		f = startFleetCluster(b, names, "")
	case "single":
		f = startFleetNATS(b, names)
	default:
		b.Fatalf("MCPWARDEN_FLEET_NATS=%q: cluster, embedded or single", natsShape)
	}
	var dsn string
	var migrate []string
	switch shards {
	case 0:
		dsn = chtest.Database(b)
	case 1, 2:
		c := chtest.StartClusterShards(b, shards)
		dsn = c.DSN(c.Database())
		migrate = []string{"--cluster", c.Name}
	default:
		b.Fatalf("MCPWARDEN_FLEET_SHARDS=%d: 0 (one server), 1 or 2 (a cluster of that many shards of 2 replicas)", shards)
	}
	f.startCollectors(b, dsn, collectors, migrate...)
	st := openStore(b, dsn)
	b.StartTimer()
	rep, err := Run(context.Background(), Config{Hosts: f.hosts, Duration: dur, Rate: rate, Mix: DefaultMix, MaxInFlight: sh.inFlight, SpoolDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	ss, c, err := readBack(context.Background(), st, rep, 30*time.Minute)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if !c.OK() {
		b.Fatalf("not stored exactly: %s", c)
	}
	b.ReportMetric(ss.Sustained, "events/s")
	b.ReportMetric(float64(rep.Events)/rep.Elapsed().Seconds(), "offered-events/s")
	b.ReportMetric(ss.LagP50MS, "lag-p50-ms")
	b.ReportMetric(ss.LagP99MS, "lag-p99-ms")
	b.ReportMetric(float64(c.Lost()), "lost")
	b.ReportMetric(float64(c.Rows-c.Distinct), "duplicate-rows")
	b.Logf("%d hosts, %d runs, %d events (%v) in %.1f s; stored %d distinct in %d rows, drained %.1f s after the last publish; lag p50 %.0f ms p99 %.0f ms max %.0f ms; refused %d, spooled messages %d",
		hosts, rep.Runs, rep.Events, rep.ByKind, rep.Elapsed().Seconds(), c.Distinct, c.Rows, ss.DrainSec, ss.LagP50MS, ss.LagP99MS, ss.LagMaxMS, rep.Refused, rep.Spooled)
}
