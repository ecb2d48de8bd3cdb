package collector

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestDeployNATSConfig runs nats-server on deploy/nats/nats-server.conf
// (TLS, the per-host and collector users; only paths, ports and
// certificates replaced) and walks the fleet flow: a collector creates the
// stream and consumes; host web-1 publishes its own events over TLS; web-1
// cannot publish under web-2's subject; nobody connects without TLS or with
// a wrong password.
func TestDeployNATSConfig(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := writeTestPKI(t, dir)
	port := testenv.FreePort(t)
	text := string(conf)
	for old, repl := range map[string]string{
		"0.0.0.0:4222":    "127.0.0.1:" + strconv.Itoa(port),
		"127.0.0.1:8222":  "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"/data/jetstream": filepath.Join(dir, "js"),
		"/etc/nats/tls/":  dir + "/",
	} {
		if !strings.Contains(text, old) {
			t.Fatalf("deploy/nats/nats-server.conf no longer contains %q, which this test replaces", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	confPath := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(confPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{"HOST_WEB_1_PASSWORD": randomPassword(t), "HOST_WEB_2_PASSWORD": randomPassword(t), "COLLECTOR_PASSWORD": randomPassword(t)}
	for k, v := range pw {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		t.Fatalf("deploy/nats/nats-server.conf does not load: %v", err)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server on the deploy configuration did not start")
	}
	url := func(user, password string) string {
		return "nats://" + user + ":" + password + "@127.0.0.1:" + strconv.Itoa(port)
	}
	conn := func(user, password string) stream.ConnOptions {
		return stream.ConnOptions{URL: url(user, password), CAFile: ca, Name: user}
	}

	// The collector creates the stream and its consumer, and stores.
	dsn := chtest.Database(t)
	c, err := New(Config{NATS: conn("collector", pw["COLLECTOR_PASSWORD"]), ClickHouseDSN: dsn, Migrate: true,
		Stream: &stream.Config{}, BatchEvents: 1000, BatchWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := stream.Connect(conn("collector", pw["COLLECTOR_PASSWORD"]))
		if err == nil {
			js, _ := nc.JetStream()
			_, err = js.StreamInfo(stream.Name)
			nc.Close()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not create the stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Host web-1 publishes its own events through the publisher, over TLS.
	hostNC, err := stream.Connect(conn("host-web-1", pw["HOST_WEB_1_PASSWORD"]))
	if err != nil {
		t.Fatalf("host-web-1 cannot connect: %v", err)
	}
	defer hostNC.Close()
	pub, err := publish.New(context.Background(), publish.Config{Conn: hostNC, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatalf("host-web-1 cannot start a publisher: %v", err)
	}
	defer pub.Close(context.Background())
	evs := eventgen.New("web-1").Mixed(500)
	if err := pub.Publish(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	waitDistinct(t, openStore(t, dsn), uint64(len(evs)), 30*time.Second)

	// ...but not under web-2's subject.
	js, err := hostNC.JetStream(nats.MaxWait(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	body, err := schema.EncodeBatch(eventgen.New("web-2").Mixed(5)[1:2])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(stream.Subject("web-2", schema.KindFileOp), body); err == nil {
		t.Error("host-web-1 published under web-2's subject")
	}

	// No plain-text connections, no wrong passwords.
	if nc, err := nats.Connect(url("host-web-1", pw["HOST_WEB_1_PASSWORD"]), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client connected without TLS")
	}
	if nc, err := stream.Connect(conn("host-web-1", "wrong"), nats.MaxReconnects(0), nats.RetryOnFailedConnect(false)); err == nil {
		nc.Close()
		t.Error("a wrong password connected")
	}
}

// writeTestPKI writes ca.pem, server.pem and server-key.pem (for 127.0.0.1)
// into dir and returns the CA's path.
func writeTestPKI(t *testing.T, dir string) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcpwarden test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(dir, "ca.pem"):         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		filepath.Join(dir, "server.pem"):     string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		filepath.Join(dir, "server-key.pem"): string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
	}
	testenv.WriteFiles(t, files)
	return filepath.Join(dir, "ca.pem")
}
