package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

const childEnv = "MCPWARDEN_AUDIT_TEST_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		// Restricted child: only dir is readable; /etc/hostname is not.
		if err := landlock.V7.RestrictPaths(landlock.RODirs(dir)); err != nil {
			fmt.Fprintln(os.Stderr, "restrict:", err)
			os.Exit(2)
		}
		_, err := os.ReadFile("/etc/hostname")
		if err == nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		typ  uint16
		msg  string
		want any
	}{
		{"access quoted path", 1423, `audit(1764480000.123:456): domain=18ed00109 blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611`,
			LandlockAccess{Serial: 456, TimeMS: 1764480000123, Domain: "18ed00109", Blockers: []string{"fs.read_file"}, Path: "/etc/hostname"}},
		{"access hex path", 1423, `audit(1764480000.001:7): domain=1a blockers=fs.read_file,fs.execute path=2F746D702F6120622F63 dev="vda" ino=1`,
			LandlockAccess{Serial: 7, TimeMS: 1764480000001, Domain: "1a", Blockers: []string{"fs.read_file", "fs.execute"}, Path: "/tmp/a b/c"}},
		{"access with pid", 1423, `audit(1.002:8): domain=1a blockers=fs.write_file pid=42 comm="node" path="/x"`,
			LandlockAccess{Serial: 8, TimeMS: 1002, Domain: "1a", Blockers: []string{"fs.write_file"}, Path: "/x", PID: 42, Comm: "node"}},
		{"domain allocated", 1424, `audit(1764480000.123:456): domain=18ed00109 status=allocated mode=enforcing pid=17821 uid=0 exe="/usr/bin/node" comm="node"`,
			LandlockDomain{Serial: 456, TimeMS: 1764480000123, Domain: "18ed00109", Status: "allocated", Mode: "enforcing", PID: 17821}},
		{"domain deallocated", 1424, `audit(1764480001.000:460): domain=18ed00109 status=deallocated denials=3`,
			LandlockDomain{Serial: 460, TimeMS: 1764480001000, Domain: "18ed00109", Status: "deallocated", Denials: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := Parse(tc.typ, []byte(tc.msg))
			if err != nil {
				t.Fatal(err)
			}
			got, err := rec.Landlock([]byte(tc.msg))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for name, msg := range map[string]string{
		"no header":        `domain=1 blockers=x`,
		"unclosed header":  `audit(1.2:3 domain=1`,
		"no serial":        `audit(1.2): domain=1`,
		"bad ms":           `audit(1.2000:3): domain=1`,
		"unterminated":     `audit(1.2:3): domain=1 path="/etc`,
		"no equals":        `audit(1.2:3): domain`,
		"non-hex domain":   `audit(1.2:3): domain=zz blockers=fs.read_file`,
		"domain too long":  `audit(1.2:3): domain=11111111111111111 blockers=fs.read_file`,
		"missing domain":   `audit(1.2:3): blockers=fs.read_file`,
		"negative seconds": `audit(-1.2:3): domain=1`,
	} {
		t.Run(name, func(t *testing.T) {
			rec, err := Parse(TypeLandlockAccess, []byte(msg))
			if err == nil {
				_, err = rec.Landlock([]byte(msg))
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("want ErrMalformed, got %v", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(uint16(1423), []byte(`audit(1764480000.123:456): domain=18ed00109 blockers=fs.read_file path="/etc/hostname" dev="vda" ino=611`))
	f.Add(uint16(1424), []byte(`audit(1764480000.123:456): domain=18ed00109 status=allocated mode=enforcing pid=17821 exe="/x"`))
	f.Add(uint16(1423), []byte(`audit(1.002:8): domain=1a blockers=fs.write_file path=2F746D70`))
	f.Fuzz(func(t *testing.T, typ uint16, msg []byte) {
		rec, err := Parse(typ, msg)
		if err != nil {
			return
		}
		if len(rec.Fields) > maxFields {
			t.Fatalf("%d fields", len(rec.Fields))
		}
		ll, err := rec.Landlock(msg)
		if err != nil {
			return
		}
		switch v := ll.(type) {
		case LandlockAccess:
			if !isHexID(v.Domain) || len(v.Blockers) > 64 {
				t.Fatalf("accepted bad access record %#v", v)
			}
		case LandlockDomain:
			if !isHexID(v.Domain) {
				t.Fatalf("accepted bad domain record %#v", v)
			}
		}
	})
}

// TestLandlockDenialRecords runs a Landlock-restricted child that reads a
// file outside its ruleset and expects both of Landlock's records for it.
func TestLandlockDenialRecords(t *testing.T) {
	testenv.RequireRoot(t)
	if err := Enable(); err != nil {
		t.Fatalf("enable audit: %v", err)
	}
	on, err := Enabled()
	if err != nil || !on {
		t.Fatalf("audit enabled = %v, %v", on, err)
	}
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var recs []any
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(r any) { mu.Lock(); recs = append(recs, r); mu.Unlock() })
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("restricted child: %v", err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var access *LandlockAccess
		var domain *LandlockDomain
		for _, r := range recs {
			switch v := r.(type) {
			case LandlockAccess:
				if v.Path == "/etc/hostname" {
					access = &v
				}
			case LandlockDomain:
				if v.PID == pid && v.Status == "allocated" {
					domain = &v
				}
			}
		}
		mu.Unlock()
		if access != nil && domain != nil {
			if access.Domain != domain.Domain {
				t.Fatalf("access domain %s != allocated domain %s", access.Domain, domain.Domain)
			}
			if len(access.Blockers) == 0 || access.Blockers[0] != "fs.read_file" {
				t.Errorf("blockers %v", access.Blockers)
			}
			t.Logf("access %+v domain %+v", *access, *domain)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records not seen for pid %d: %+v", pid, recs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
