package launcher

import (
	"strings"
	"testing"
)

func TestServerEnv(t *testing.T) {
	host := map[string]string{"PATH": "/usr/bin", "LANG": "C.UTF-8", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "k", "NODE_OPTIONS": "--require /evil.js", "TOKEN": "t"}
	getenv := func(k string) string { return host[k] }
	env, err := serverEnv([]string{"TOKEN", "MODE=fast"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(env, "\n")
	for _, want := range []string{"PATH=/usr/bin", "LANG=C.UTF-8", "TOKEN=t", "MODE=fast"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in %q", want, got)
		}
	}
	for _, bad := range []string{"HOME=/root", "AWS_SECRET", "NODE_OPTIONS"} {
		if strings.Contains(got, bad) {
			t.Errorf("leaked %s: %q", bad, got)
		}
	}
	for _, e := range []string{"HOME=/x", "TMPDIR", "LD_PRELOAD=/x.so", "=x", "A B=1"} {
		if _, err := serverEnv([]string{e}, getenv); err == nil {
			t.Errorf("--env %q accepted", e)
		}
	}
	env, _ = serverEnv(nil, func(string) string { return "" })
	if strings.Join(env, ",") != "PATH="+defaultPATH {
		t.Errorf("empty host env: %v", env)
	}
}
