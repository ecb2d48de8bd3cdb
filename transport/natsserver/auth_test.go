package natsserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const testHost = "web-1"

// startWithAuth starts the embedded server with generated credentials for
// testHost and ensures the stream as the daemon.
func startWithAuth(t *testing.T) (*Server, *Credentials) {
	t.Helper()
	root := t.TempDir()
	creds, err := LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, Auth: creds, EventHost: testHost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	nc, _ := connectRole(t, s, stream.RoleDaemon)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := stream.Ensure(ctx, js, stream.Config{}); err != nil {
		t.Fatalf("the daemon cannot ensure the stream: %v", err)
	}
	return s, creds
}

func connectRole(t *testing.T, s *Server, r stream.Role) (*nats.Conn, *natstest.Violations) {
	t.Helper()
	return natstest.Connect(t, s.Client(r, "test-"+string(r)))
}

func escapeBatch(t *testing.T, host string) []byte {
	t.Helper()
	e := schema.Origin{Host: host, BootID: "b"}.NewEvent(schema.KindFinding, schema.NewID(), "s", "", time.Now())
	e.Finding = &schema.Finding{Type: schema.FindingEscape, Severity: schema.SeverityCritical, EvidenceIDs: []string{schema.NewID()}, Reason: "succeeded_outside_scope"}
	body, err := schema.EncodeBatch([]schema.Event{e})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func streamMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestNoCredentialsNoConnection: without a role's seed, or with a seed the
// server does not know, nobody connects.
func TestNoCredentialsNoConnection(t *testing.T) {
	s, _ := startWithAuth(t)
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) stream.ConnOptions
	}{
		{"anonymous", func(*testing.T) stream.ConnOptions { return stream.ConnOptions{URL: s.ClientURL()} }},
		{"unknown nkey", func(t *testing.T) stream.ConnOptions {
			kp, err := nkeys.CreateUser()
			if err != nil {
				t.Fatal(err)
			}
			seed, _ := kp.Seed()
			f := filepath.Join(t.TempDir(), "other.nk")
			if err := os.WriteFile(f, seed, 0o600); err != nil {
				t.Fatal(err)
			}
			return stream.ConnOptions{URL: s.ClientURL(), NkeyFile: f}
		}},
		{"user and password", func(*testing.T) stream.ConnOptions {
			return stream.ConnOptions{URL: s.ClientURL(), User: "daemon", Password: "daemon"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As the commands connect (retrying in the background when the
			// server is away): a server that refuses is an error at once.
			nc, err := stream.Connect(tc.opts(t))
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("refused with %v, want an authorization violation", err)
			}
		})
	}
}

// TestConnectWaitsForAnAbsentServer: a server that is not there (yet) is
// waited for, so a publisher spools meanwhile.
func TestConnectWaitsForAnAbsentServer(t *testing.T) {
	nc, err := stream.Connect(stream.ConnOptions{URL: "nats://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))})
	if err != nil {
		t.Fatalf("an absent server is an error: %v", err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected to nothing")
	}
}

// TestRolesHoldOnlyTheirRights walks each role through what it needs and
// what it must not do, on the real server.
func TestRolesHoldOnlyTheirRights(t *testing.T) {
	s, _ := startWithAuth(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	dnc, dv := connectRole(t, s, stream.RoleDaemon)
	djs, _ := jetstream.New(dnc)
	cnc, cv := connectRole(t, s, stream.RoleCollector)
	cjs, _ := jetstream.New(cnc)
	rnc, rv := connectRole(t, s, stream.RoleReader)
	rjs, _ := jetstream.New(rnc)

	// The daemon publishes its host's events, and only its host's.
	if _, err := djs.Publish(ctx, stream.Subject(testHost, schema.KindFinding), escapeBatch(t, testHost)); err != nil {
		t.Fatalf("the daemon cannot publish its own events: %v", err)
	}
	before := streamMsgs(t, cjs)
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
		v    *natstest.Violations
		subj string
	}{
		{"daemon as another host", dnc, dv, stream.Subject("web-2", schema.KindFinding)},
		// Its own token, but no kind's subject: each would be one more
		// subject past the stream's per-subject cap.
		{"daemon on a subject of no kind", dnc, dv, stream.SubjectPrefix + "." + stream.HostToken(testHost) + ".flood1"},
		{"daemon below a kind's subject", dnc, dv, stream.Subject(testHost, schema.KindFinding) + ".flood2"},
		{"collector", cnc, cv, stream.Subject(testHost, schema.KindFinding)},
		{"reader", rnc, rv, stream.Subject(testHost, schema.KindFinding)},
	} {
		if err := tc.nc.Publish(tc.subj, escapeBatch(t, testHost)); err != nil {
			t.Fatal(err)
		}
		tc.v.Wait(t, tc.subj)
	}
	if after := streamMsgs(t, cjs); after != before {
		t.Fatalf("forged publishes reached the stream: %d messages, was %d", after, before)
	}

	// The collector binds its durable, pulls and acks.
	cons, err := cjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Durable: stream.CollectorDurable, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: stream.AllSubjects})
	if err != nil {
		t.Fatalf("the collector cannot create its durable: %v", err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		got++
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("the collector cannot ack: %v", err)
		}
	}
	if got != 1 {
		t.Fatalf("the collector pulled %d messages, want 1", got)
	}

	// The reader reads everything through an ordered consumer of its own.
	oc, err := rjs.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{stream.AllSubjects}})
	if err != nil {
		t.Fatalf("the reader cannot create an ordered consumer: %v", err)
	}
	if _, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("the reader cannot read: %v", err)
	}

	// The daemon reads its own host back through its cross-check
	// consumer, and through nothing else.
	xc := stream.CrossCheckConsumer(testHost)
	if _, err := djs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: xc, FilterSubject: stream.SubjectPrefix + "." + testHost + ".>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("the daemon cannot create its cross-check consumer: %v", err)
	}
	refused := []struct {
		name string
		v    *natstest.Violations
		subj string
		do   func(ctx context.Context) error
	}{
		{"daemon reads another host", dv, "$JS.API.CONSUMER.CREATE." + stream.Name + "." + xc + "." + stream.AllSubjects, func(ctx context.Context) error {
			_, err := djs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Name: xc, FilterSubject: stream.AllSubjects})
			return err
		}},
		{"daemon pulls from the collectors' durable", dv, "$JS.API.CONSUMER.MSG.NEXT." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return dnc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream.Name+"."+stream.CollectorDurable, stream.HostInbox(testHost)+".x", []byte(`{"batch":1}`))
		}},
		{"daemon deletes the stream", dv, "$JS.API.STREAM.DELETE." + stream.Name, func(ctx context.Context) error { return djs.DeleteStream(ctx, stream.Name) }},
		{"collector publishes a finding", cv, stream.Subject(testHost, schema.KindFinding), func(ctx context.Context) error {
			return cnc.Publish(stream.Subject(testHost, schema.KindFinding), escapeBatch(t, testHost))
		}},
		{"reader retargets the collectors' durable", rv, "$JS.API.CONSUMER.CREATE." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			_, err := rjs.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{Durable: stream.CollectorDurable, FilterSubject: stream.SubjectPrefix + ".nobody.>", AckPolicy: jetstream.AckExplicitPolicy})
			return err
		}},
		{"reader deletes the collectors' durable", rv, "$JS.API.CONSUMER.DELETE." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return rjs.DeleteConsumer(ctx, stream.Name, stream.CollectorDurable)
		}},
		{"reader deletes the daemon's cross-check consumer", rv, "$JS.API.CONSUMER.DELETE." + stream.Name + "." + xc, func(ctx context.Context) error {
			return rjs.DeleteConsumer(ctx, stream.Name, xc)
		}},
		{"reader pulls from the collectors' durable", rv, "$JS.API.CONSUMER.MSG.NEXT." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return rnc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream.Name+"."+stream.CollectorDurable, stream.ReaderInbox+".x", []byte(`{"batch":1}`))
		}},
		{"reader acks", rv, "$JS.ACK." + stream.Name + "." + stream.CollectorDurable, func(ctx context.Context) error {
			return rnc.Publish("$JS.ACK."+stream.Name+"."+stream.CollectorDurable+".1.1.1.1.0", []byte("+ACK"))
		}},
		{"reader purges the stream", rv, "$JS.API.STREAM.PURGE." + stream.Name, func(ctx context.Context) error {
			st, err := rjs.Stream(ctx, stream.Name)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		}},
		{"reader snoops on every inbox", rv, `Subscription to "_INBOX.>"`, func(ctx context.Context) error {
			_, err := rnc.SubscribeSync("_INBOX.>")
			if err == nil {
				err = rnc.Flush()
			}
			return err
		}},
		{"reader snoops on the collector's inbox", rv, `Subscription to "` + stream.CollectorInbox + `.>"`, func(ctx context.Context) error {
			_, err := rnc.SubscribeSync(stream.CollectorInbox + ".>")
			if err == nil {
				err = rnc.Flush()
			}
			return err
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			tc.v.Drain()
			c, cancel := short()
			defer cancel()
			_ = tc.do(c) // a refused request times out; the violation is what counts
			tc.v.Wait(t, tc.subj)
		})
	}
	// The durable still delivers everything to the collector, unchanged.
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.FilterSubject != stream.AllSubjects {
		t.Fatalf("the collectors' durable was retargeted to %q", info.Config.FilterSubject)
	}
	if _, err := cjs.Stream(ctx, stream.Name); err != nil {
		t.Fatalf("the stream is gone: %v", err)
	}
}

func TestCredentialsFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nats-auth")
	c1, err := LoadOrCreateCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("credentials dir mode %v, %v; want 0700", st.Mode().Perm(), err)
	}
	seen := map[string]bool{}
	for _, r := range stream.Roles {
		st, err := os.Stat(stream.SeedFile(dir, r))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s seed mode %v, %v; want 0600", r, st.Mode().Perm(), err)
		}
		pub := c1.PublicKey(r)
		if !nkeys.IsValidPublicUserKey(pub) || seen[pub] {
			t.Fatalf("role %s has key %q (seen before: %v)", r, pub, seen[pub])
		}
		seen[pub] = true
	}
	c2, err := LoadOrCreateCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stream.Roles {
		if c1.PublicKey(r) != c2.PublicKey(r) {
			t.Fatalf("role %s got a new key on the second start", r)
		}
	}

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"group-readable seed", func(t *testing.T, dir string) { chmod(t, stream.SeedFile(dir, stream.RoleReader), 0o640) }, "chmod 600"},
		{"world-readable directory", func(t *testing.T, dir string) { chmod(t, dir, 0o755) }, "chmod 700"},
		{"symlinked seed", func(t *testing.T, dir string) {
			f := stream.SeedFile(dir, stream.RoleDaemon)
			other := filepath.Join(t.TempDir(), "seed")
			if err := os.Rename(f, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, f); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
		{"garbage seed", func(t *testing.T, dir string) {
			if err := os.WriteFile(stream.SeedFile(dir, stream.RoleCollector), []byte("not a seed\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "no nkey user seed"},
		{"seed of someone else", func(t *testing.T, dir string) {
			testenv.RequireRoot(t) // to chown
			if err := os.Chown(stream.SeedFile(dir, stream.RoleReader), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "nats-auth")
			if _, err := LoadOrCreateCredentials(dir); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			_, err := LoadOrCreateCredentials(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

// nobodyEnv names the server a re-executed test binary attacks as nobody.
const nobodyEnv = "MCPWARDEN_TEST_NATS_AS_NOBODY"

type nobodyReport struct {
	ReadSeed, Anonymous, OwnKey, Publish string
}

// TestNonRootUserCannotReadOrPublish re-executes this test binary as
// nobody against the embedded server: it can read no seed, and connects
// neither without credentials nor with a key of its own, so it can read no
// event and publish no forged one; the stream holds only what the daemon
// published.
func TestNonRootUserCannotReadOrPublish(t *testing.T) {
	if os.Getenv(nobodyEnv) != "" {
		return // the child's work is done in TestMain
	}
	testenv.RequireRoot(t)
	s, creds := startWithAuth(t)
	nc, _ := connectRole(t, s, stream.RoleReader)
	js, _ := jetstream.New(nc)
	before := streamMsgs(t, js)

	// The test binary lives in a private build directory: copy it where
	// nobody can execute it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(mustPublicDir(t), "natsserver.test")
	copyFile(t, exe, bin, 0o755)
	arg, _ := json.Marshal(map[string]string{"url": s.ClientURL(), "seed": stream.SeedFile(creds.Dir, stream.RoleDaemon), "subject": stream.Subject(testHost, schema.KindFinding)})
	cmd := exec.Command(bin, "-test.run=^TestMain$")
	cmd.Env = []string{nobodyEnv + "=" + string(arg), "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child as nobody: %v\n%s", err, stderr.String())
	}
	var rep nobodyReport
	if err := json.Unmarshal(lastLine(out), &rep); err != nil {
		t.Fatalf("child report %q: %v", out, err)
	}
	if !strings.Contains(rep.ReadSeed, "permission denied") {
		t.Errorf("nobody reading the daemon's seed: %s", rep.ReadSeed)
	}
	for what, got := range map[string]string{"without credentials": rep.Anonymous, "with its own key": rep.OwnKey} {
		if !strings.Contains(strings.ToLower(got), "authorization violation") {
			t.Errorf("nobody connecting %s: %s", what, got)
		}
	}
	if after := streamMsgs(t, js); after != before {
		t.Fatalf("the stream grew from %d to %d messages while nobody tried to publish", before, after)
	}
}

// TestMain runs the child side of TestNonRootUserCannotReadOrPublish and
// the impostor of TestImpostorOnTheLoopbackPortIsRefused.
func TestMain(m *testing.M) {
	if arg := os.Getenv(impostorEnv); arg != "" {
		os.Exit(runImpostor(arg))
	}
	if arg := os.Getenv(nobodyEnv); arg != "" {
		var a map[string]string
		if err := json.Unmarshal([]byte(arg), &a); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		rep := nobodyReport{ReadSeed: "read"}
		if _, err := os.ReadFile(a["seed"]); err != nil {
			rep.ReadSeed = err.Error()
		}
		try := func(opts ...nats.Option) string {
			nc, err := nats.Connect(a["url"], append(opts, nats.MaxReconnects(0))...)
			if err != nil {
				return err.Error()
			}
			defer nc.Close()
			_ = nc.Publish(a["subject"], []byte("forged"))
			_ = nc.Flush()
			return "connected"
		}
		rep.Anonymous = try()
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		rep.OwnKey = try(nats.Nkey(pub, kp.Sign))
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func mustPublicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpwarden-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	chmod(t, dir, 0o755)
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}
