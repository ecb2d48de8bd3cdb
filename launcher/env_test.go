package launcher

import (
	"slices"
	"strings"
	"testing"
)

func TestServerEnv(t *testing.T) {
	host := []string{
		"PATH=/usr/bin", "LANG=C.UTF-8", "HOME=/root", "TMPDIR=/tmp", "TMP=/tmp", "USER=alice",
		"MEMORY_FILE_PATH=/data/memory.json", "LOG_LEVEL=debug", "ALLOWED_DIRECTORIES=/a:/b",
		"AWS_SECRET_ACCESS_KEY=k", "AWS_REGION=eu-west-1", "GITHUB_TOKEN=t", "OPENAI_API_KEY=x", "db_password=p", "Session_Cookie=c",
		"DATABASE_URL=postgres://app:hunter2@db:5432/x", "PUBLIC_URL=https://example.com/x", "NOTES=ghp_abcdefghijklmnopqrstuvwxyz012345",
		"NODE_OPTIONS=--require /evil.js", "LD_PRELOAD=/evil.so", "PYTHONPATH=/evil", "BASH_ENV=/evil.sh", "MCPWARDEN_SANDBOX_HELPER=1",
		"SSH_AUTH_SOCK=/run/agent", "TERM=xterm", "KRB5CCNAME=FILE:/tmp/krb5cc_0", "DOCKER_HOST=unix:///run/docker.sock",
		"DISPLAY=:0", "XDG_RUNTIME_DIR=/run/user/0", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus", "LESSOPEN=|/bin/x %s",
		"PYTHONWARNINGS=ignore::evil.Warning", "PYTHONBREAKPOINT=evil.hook", "NODE_COMPILE_CACHE=/workspace/cache", "SSLKEYLOGFILE=/workspace/keys",
	}
	tests := []struct {
		name        string
		policy      EnvPolicy
		want        []string // present exactly
		notWant     []string // names absent
		wantDropped []string
		err         bool
	}{
		{
			name:        "default: the environment minus credentials and runtime variables",
			want:        []string{"PATH=/usr/bin", "LANG=C.UTF-8", "USER=alice", "MEMORY_FILE_PATH=/data/memory.json", "LOG_LEVEL=debug", "ALLOWED_DIRECTORIES=/a:/b", "PUBLIC_URL=https://example.com/x", "TERM=xterm"},
			notWant:     []string{"HOME", "TMPDIR", "TMP", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "GITHUB_TOKEN", "OPENAI_API_KEY", "db_password", "Session_Cookie", "DATABASE_URL", "NOTES", "NODE_OPTIONS", "LD_PRELOAD", "PYTHONPATH", "BASH_ENV", "MCPWARDEN_SANDBOX_HELPER", "SSH_AUTH_SOCK", "KRB5CCNAME", "DOCKER_HOST", "DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "LESSOPEN", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "NODE_COMPILE_CACHE", "SSLKEYLOGFILE"},
			wantDropped: []string{"TMP", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "GITHUB_TOKEN", "OPENAI_API_KEY", "db_password", "Session_Cookie", "DATABASE_URL", "NOTES", "NODE_OPTIONS", "LD_PRELOAD", "PYTHONPATH", "BASH_ENV", "MCPWARDEN_SANDBOX_HELPER", "SSH_AUTH_SOCK", "KRB5CCNAME", "DOCKER_HOST", "DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "LESSOPEN", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "NODE_COMPILE_CACHE", "SSLKEYLOGFILE"},
		},
		{
			name:    "--env NAME passes a credential by name; NAME=VALUE sets",
			policy:  EnvPolicy{Extra: []string{"GITHUB_TOKEN", "MODE=fast", "NODE_OPTIONS=--max-old-space-size=256", "UNSET_ONE"}},
			want:    []string{"GITHUB_TOKEN=t", "MODE=fast", "NODE_OPTIONS=--max-old-space-size=256", "UNSET_ONE="},
			notWant: []string{"AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"},
		},
		{
			name:    "--clean-env: an allowlist",
			policy:  EnvPolicy{Clean: true, Extra: []string{"MEMORY_FILE_PATH"}},
			want:    []string{"PATH=/usr/bin", "LANG=C.UTF-8", "TERM=xterm", "MEMORY_FILE_PATH=/data/memory.json"},
			notWant: []string{"USER", "LOG_LEVEL", "GITHUB_TOKEN", "HOME"},
		},
		{name: "HOME is the run's", policy: EnvPolicy{Extra: []string{"HOME=/x"}}, err: true},
		{name: "TMPDIR is the run's", policy: EnvPolicy{Extra: []string{"TMPDIR"}}, err: true},
		{name: "LD_PRELOAD", policy: EnvPolicy{Extra: []string{"LD_PRELOAD=/x.so"}}, err: true},
		{name: "empty name", policy: EnvPolicy{Extra: []string{"=x"}}, err: true},
		{name: "blank in name", policy: EnvPolicy{Extra: []string{"A B=1"}}, err: true},
		{name: "NUL in value", policy: EnvPolicy{Extra: []string{"A=b\x00c"}}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, dropped, err := serverEnv(tt.policy, host)
			if (err != nil) != tt.err {
				t.Fatalf("err %v", err)
			}
			if tt.err {
				return
			}
			for _, w := range tt.want {
				if !slices.Contains(env, w) {
					t.Errorf("missing %s in %q", w, env)
				}
			}
			for _, n := range tt.notWant {
				for _, e := range env {
					if strings.HasPrefix(e, n+"=") {
						t.Errorf("leaked %s", e)
					}
				}
			}
			if tt.wantDropped != nil && !slices.Equal(dropped, tt.wantDropped) {
				t.Errorf("dropped %q, want %q", dropped, tt.wantDropped)
			}
			for _, d := range dropped {
				if strings.Contains(d, "=") {
					t.Errorf("a dropped entry carries a value: %q", d)
				}
			}
		})
	}
	env, _, _ := serverEnv(EnvPolicy{}, nil)
	if strings.Join(env, ",") != "PATH="+defaultPATH {
		t.Errorf("empty host env: %v", env)
	}
}

// FuzzServerEnv: whatever the launcher's environment, the server never gets
// HOME, TMPDIR or the loader's variables from it, nor a value that looks
// like a credential, and every entry is NAME=VALUE.
func FuzzServerEnv(f *testing.F) {
	f.Add("A=1\x00LD_PRELOAD=/x\x00TOKEN=y\x00URL=http://u:p@h/")
	f.Add("=x\x00HOME=/root\x00x")
	f.Fuzz(func(t *testing.T, joined string) {
		env, _, err := serverEnv(EnvPolicy{}, strings.Split(joined, "\x00"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range env {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" {
				t.Fatalf("entry %q", e)
			}
			if slices.Contains(forbiddenVars, k) || strings.HasPrefix(k, "LD_") || looksLikeCredential(k, v) && k != "PATH" {
				t.Fatalf("passed %q", e)
			}
		}
	})
}
