package hostconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in, err string
	}{
		{"empty object", `{}`, ""},
		{"everything", `{"state_dir":"/var/lib/x","daemon_socket":"/run/x.sock","path_key":"/var/lib/x/k","nats":{"url":"nats://127.0.0.1:4222","creds":"/c","nkey":"/n","user":"u","password_file":"/p","tls_ca":"/a","tls_cert":"/b","tls_key":"/d"},"clickhouse_dsn":"clickhouse://127.0.0.1:9000/db"}`, ""},
		{"daemon off", `{"daemon_socket":"off"}`, ""},
		{"unknown member", `{"state_dir":"/x","daemon":"/y"}`, "daemon: unknown setting"},
		{"case variant", `{"State_Dir":"/x"}`, "unknown setting"},
		{"duplicate", `{"state_dir":"/x","state_dir":"/y"}`, "state_dir"},
		{"case duplicate", `{"path_key":"/x","nats":{"url":"nats://h:1","URL":"nats://e:1"}}`, "nats"},
		{"wrong type", `{"state_dir":1}`, "state_dir"},
		{"relative path", `{"path_key":"key"}`, "path_key: \"key\" is not an absolute path"},
		{"relative socket", `{"daemon_socket":"daemon.sock"}`, "daemon_socket"},
		{"control char", `{"state_dir":"/x\u0007"}`, "control character"},
		{"bad nats scheme", `{"nats":{"url":"http://h:4222"}}`, "scheme \"http\""},
		{"bad dsn scheme", `{"clickhouse_dsn":"http://h:8123/db"}`, "use clickhouse://"},
		{"dsn without host", `{"clickhouse_dsn":"clickhouse:///db"}`, "not a ClickHouse DSN"},
		{"trailing data", `{} {}`, "after"},
		{"not an object", `[]`, ""},
		{"too deep", `{"nats":{"url":{"a":{"b":{}}}}}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			switch {
			case c.err == "" && c.name != "not an object" && c.name != "too deep":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case err == nil:
				t.Fatalf("accepted %s", c.in)
			case c.err != "" && !strings.Contains(err.Error(), c.err):
				t.Fatalf("error %q does not name %q", err, c.err)
			}
		})
	}
}

func TestDefaultPath(t *testing.T) {
	env := func(m map[string]string) Env { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name string
		env  map[string]string
		euid int
		want string
		err  bool
	}{
		{"root", map[string]string{"HOME": "/root"}, 0, "/etc/mcpwarden/config.json", false},
		{"user", map[string]string{"HOME": "/home/a"}, 1000, "/home/a/.config/mcpwarden/config.json", false},
		{"xdg", map[string]string{"HOME": "/home/a", "XDG_CONFIG_HOME": "/x"}, 1000, "/x/mcpwarden/config.json", false},
		{"relative xdg ignored", map[string]string{"HOME": "/home/a", "XDG_CONFIG_HOME": "x"}, 1000, "/home/a/.config/mcpwarden/config.json", false},
		{"explicit", map[string]string{"MCPWARDEN_CONFIG": "/etc/other.json"}, 0, "/etc/other.json", false},
		{"explicit relative", map[string]string{"MCPWARDEN_CONFIG": "other.json"}, 0, "", true},
		{"no home", map[string]string{}, 1000, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := DefaultPath(env(c.env), c.euid)
			if (err != nil) != c.err || got != c.want {
				t.Fatalf("got %q, %v; want %q, error %v", got, err, c.want, c.err)
			}
		})
	}
}

// writeConfig writes a configuration file 0600 in a fresh 0700 directory.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPrecedence(t *testing.T) {
	p := writeConfig(t, `{"state_dir":"/from/file","path_key":"/file/key","nats":{"url":"nats://file:4222"}}`)
	env := map[string]string{EnvFile: p, "MCPWARDEN_PATH_KEY": "/env/key", "MCPWARDEN_NATS_URL": ""}
	c, err := Load(func(k string) string { return env[k] }, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		key, value string
		src        Source
	}{
		{"state_dir", "/from/file", SourceFile},
		{"path_key", "/env/key", SourceEnv},
		{"nats.url", "nats://file:4222", SourceFile}, // an empty variable does not unset it
		{"daemon_socket", "", SourceNone},
	} {
		if v, src := c.Get(w.key); v != w.value || src != w.src {
			t.Errorf("%s = %q from %q, want %q from %q", w.key, v, src, w.value, w.src)
		}
	}
	if !c.Found || c.Path != p || c.PathSource != SourceEnv {
		t.Errorf("file %q found %v source %q", c.Path, c.Found, c.PathSource)
	}
	if len(c.Values()) != len(Keys) {
		t.Errorf("Values lists %d settings, want %d", len(c.Values()), len(Keys))
	}
}

func TestLoadRefuses(t *testing.T) {
	euid := os.Geteuid()
	load := func(path string, extra map[string]string) error {
		env := map[string]string{EnvFile: path}
		for k, v := range extra {
			env[k] = v
		}
		_, err := Load(func(k string) string { return env[k] }, euid)
		return err
	}
	t.Run("named file missing", func(t *testing.T) {
		if err := load(filepath.Join(t.TempDir(), "none.json"), nil); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("default file missing is no configuration", func(t *testing.T) {
		home := t.TempDir()
		c, err := Load(func(k string) string { return map[string]string{"HOME": home}[k] }, 1000)
		if err != nil || c.Found {
			t.Fatalf("got %v, found %v", err, c != nil && c.Found)
		}
	})
	t.Run("group writable", func(t *testing.T) {
		p := writeConfig(t, `{}`)
		os.Chmod(p, 0o620)
		if err := load(p, nil); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("secret readable by others", func(t *testing.T) {
		p := writeConfig(t, `{"clickhouse_dsn":"clickhouse://u:hunter2@127.0.0.1:9000/db"}`)
		os.Chmod(p, 0o644)
		err := load(p, nil)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("got %v", err)
		}
		os.Chmod(p, 0o600)
		if err := load(p, nil); err != nil {
			t.Fatalf("0600 refused: %v", err)
		}
	})
	t.Run("not a regular file", func(t *testing.T) {
		if err := load(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("world-writable directory", func(t *testing.T) {
		p := writeConfig(t, `{}`)
		os.Chmod(filepath.Dir(p), 0o777)
		if err := load(p, nil); err == nil || !strings.Contains(err.Error(), "anyone may write") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("bad environment value", func(t *testing.T) {
		p := writeConfig(t, `{}`)
		if err := load(p, map[string]string{"MCPWARDEN_DAEMON_SOCKET": "rel.sock"}); err == nil || !strings.Contains(err.Error(), "MCPWARDEN_DAEMON_SOCKET") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		testenv.RequireRoot(t)
		p := writeConfig(t, `{}`)
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if err := load(p, nil); err == nil || !strings.Contains(err.Error(), "owned by uid 4242") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("symlink to a checked file", func(t *testing.T) {
		p := writeConfig(t, `{"state_dir":"/s"}`)
		link := filepath.Join(t.TempDir(), "link.json")
		os.Symlink(p, link)
		if err := load(link, nil); err != nil {
			t.Fatalf("got %v", err)
		}
	})
}

func TestRedact(t *testing.T) {
	for _, c := range []struct {
		kind     Kind
		in, want string
	}{
		{KindDSN, "clickhouse://127.0.0.1:9000/db", "clickhouse://127.0.0.1:9000/db"},
		{KindDSN, "clickhouse://default@127.0.0.1:9000/db", "clickhouse://default@127.0.0.1:9000/db"},
		{KindDSN, "clickhouse://u:hunter2@h:9000/db", "clickhouse://u:REDACTED@h:9000/db"},
		{KindDSN, "clickhouse://h:9000/db?username=u&password=hunter2", "clickhouse://h:9000/db?password=REDACTED&username=u"},
		{KindNATS, "nats://tok3n@h:4222", "nats://REDACTED@h:4222"},
		{KindNATS, "nats://a:b@h1:4222,nats://h2:4222", "nats://a:REDACTED@h1:4222,nats://h2:4222"},
		{KindNATS, "h:4222", "h:4222"},
		{KindPath, "/a:b@c", "/a:b@c"},
	} {
		if got := Redact(c.kind, c.in); got != c.want || strings.Contains(got, "hunter2") || strings.Contains(got, "tok3n") {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"state_dir":"/x"}`, `{"nats":{"url":"nats://a:b@h:1"}}`, `{"clickhouse_dsn":"clickhouse://u:p@h:9000/d?password=x"}`, `{"daemon_socket":"off"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses: every value passed its check, and no shown
		// value keeps a password the URL parser sees.
		for _, k := range Keys {
			v := k.get(cfg)
			if v == "" {
				continue
			}
			if err := check(k, v); err != nil {
				t.Fatalf("%s=%q parsed but fails its check: %v", k.Name, v, err)
			}
			if k.Kind == KindDSN {
				shown := Redact(k.Kind, v)
				if strings.Contains(shown, ":") && hasSecret(&File{ClickHouse: shown}) && shown != Redact(k.Kind, shown) {
					t.Fatalf("Redact(%q) = %q still shows a secret", v, shown)
				}
			}
		}
	})
}
