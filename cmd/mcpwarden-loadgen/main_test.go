package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "users.conf")
	seeds := filepath.Join(dir, "seeds")
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"--help"}, 0},
		{"unknown flag", []string{"--bogus"}, 2},
		{"argument", []string{"--nats", "nats://127.0.0.1:1", "extra"}, 2},
		{"no nats", []string{"--seeds", seeds}, 3},
		{"no seeds", []string{"--nats", "nats://127.0.0.1:1"}, 3},
		{"seeds missing", []string{"--users-conf", conf, "--seeds", seeds, "--hosts", "2"}, 3},
		{"bad prefix", []string{"--users-conf", conf, "--seeds", seeds, "--create-seeds", "--host-prefix", "a b"}, 3},
		{"zero hosts", []string{"--users-conf", conf, "--seeds", seeds, "--create-seeds", "--hosts", "0"}, 3},
		{"users conf", []string{"--users-conf", conf, "--seeds", seeds, "--create-seeds", "--hosts", "3"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr strings.Builder
			if got := run(context.Background(), c.args, io.Discard, &stderr); got != c.want {
				t.Fatalf("exit %d, want %d: %s", got, c.want, stderr.String())
			}
		})
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "{ nkey: U"); n != 3 {
		t.Errorf("users conf has %d users, want 3:\n%s", n, b)
	}
	if st, _ := os.Stat(conf); st.Mode().Perm() != 0o600 {
		t.Errorf("users conf mode %v", st.Mode().Perm())
	}
	for _, h := range []string{"loadgen-0001", "loadgen-0003"} {
		if st, err := os.Stat(filepath.Join(seeds, h+".nk")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("seed of %s: %v %v", h, st, err)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/help.golden")

// TestHelpGolden: --help prints the usage and every flag, as
// testdata/help.golden says (go test -run TestHelpGolden -update rewrites
// it).
func TestHelpGolden(t *testing.T) {
	var stderr strings.Builder
	if code := run(context.Background(), []string{"--help"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	golden := filepath.Join("testdata", "help.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(stderr.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestHelpGolden -update)", err)
	}
	if stderr.String() != string(want) {
		t.Errorf("help differs from %s (rerun with -update if intended):\n--- got\n%s\n--- want\n%s", golden, stderr.String(), want)
	}
}
