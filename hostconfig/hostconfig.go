// Package hostconfig is mcpwarden's configuration on one host: one JSON
// file and MCPWARDEN_* environment variables holding what every command
// would otherwise repeat on its command line (the state directory, the
// daemon's socket, the path-hash key, the NATS connection, the ClickHouse
// DSN). Command-line flags override the environment, which overrides the
// file, which overrides the built-in defaults.
//
// The file is read with the project's strict decoder (exact names, no
// duplicates, no unknown fields), and like ssh's configuration it must be
// owned by the user or root and writable by nobody else: whoever can write
// it chooses the daemon the runs report to and the key their paths are
// hashed with. A file that holds a secret (a password in a DSN or URL) must
// also be unreadable by others.
package hostconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// MaxFileSize bounds the configuration file.
const MaxFileSize = 256 << 10

// Off is the value of daemon_socket that turns the daemon off: no
// registration, and no discovery of a daemon at the default socket.
const Off = "off"

// EnvFile names the configuration file instead of the default location.
const EnvFile = "MCPWARDEN_CONFIG"

// File is the configuration file's content. Every member is optional.
type File struct {
	StateDir     string `json:"state_dir,omitempty"`
	DaemonSocket string `json:"daemon_socket,omitempty"`
	PathKey      string `json:"path_key,omitempty"`
	NATS         *NATS  `json:"nats,omitempty"`
	ClickHouse   string `json:"clickhouse_dsn,omitempty"`
}

// NATS is how commands reach NATS (the flags --nats, --nats-creds, ...).
type NATS struct {
	URL          string `json:"url,omitempty"`
	Creds        string `json:"creds,omitempty"`
	Nkey         string `json:"nkey,omitempty"`
	User         string `json:"user,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
	TLSCA        string `json:"tls_ca,omitempty"`
	TLSCert      string `json:"tls_cert,omitempty"`
	TLSKey       string `json:"tls_key,omitempty"`
}

// Kind says how a setting's value is checked and shown.
type Kind int

const (
	KindPath   Kind = iota + 1 // an absolute file or directory path
	KindSocket                 // an absolute path, or "off"
	KindNATS                   // a NATS URL list
	KindDSN                    // a ClickHouse DSN; its password is a secret
	KindName                   // a plain name (a NATS user)
)

// Key is one setting: its name in the file (dotted for nested members),
// its environment variable, its flag and what it means.
type Key struct {
	Name  string
	Env   string
	Flag  string
	Kind  Kind
	Usage string
	get   func(*File) string
}

// Keys are every setting, in the order `config show` prints them.
var Keys = []Key{
	{"state_dir", "MCPWARDEN_STATE_DIR", "--state-dir", KindPath, "state directory: audit log, spool, approval sockets, path key", func(f *File) string { return f.StateDir }},
	{"daemon_socket", "MCPWARDEN_DAEMON_SOCKET", "--daemon-socket", KindSocket, "the daemon's socket ('off': no daemon); runs register there and refuse to start if it refuses", func(f *File) string { return f.DaemonSocket }},
	{"path_key", "MCPWARDEN_PATH_KEY", "--path-key", KindPath, "key file for path hashes; the daemon and every run must share it", func(f *File) string { return f.PathKey }},
	{"nats.url", "MCPWARDEN_NATS_URL", "--nats", KindNATS, "NATS URL (comma-separated for a cluster)", func(f *File) string { return natsOf(f).URL }},
	{"nats.creds", "MCPWARDEN_NATS_CREDS", "--nats-creds", KindPath, "NATS credentials file (.creds)", func(f *File) string { return natsOf(f).Creds }},
	{"nats.nkey", "MCPWARDEN_NATS_NKEY", "--nats-nkey", KindPath, "NATS nkey seed file", func(f *File) string { return natsOf(f).Nkey }},
	{"nats.user", "MCPWARDEN_NATS_USER", "--nats-user", KindName, "NATS user name (with nats.password_file)", func(f *File) string { return natsOf(f).User }},
	{"nats.password_file", "MCPWARDEN_NATS_PASSWORD_FILE", "--nats-password-file", KindPath, "file holding the NATS user's password", func(f *File) string { return natsOf(f).PasswordFile }},
	{"nats.tls_ca", "MCPWARDEN_NATS_TLS_CA", "--nats-tls-ca", KindPath, "CA file for the NATS server's certificate", func(f *File) string { return natsOf(f).TLSCA }},
	{"nats.tls_cert", "MCPWARDEN_NATS_TLS_CERT", "--nats-tls-cert", KindPath, "client certificate file for NATS TLS", func(f *File) string { return natsOf(f).TLSCert }},
	{"nats.tls_key", "MCPWARDEN_NATS_TLS_KEY", "--nats-tls-key", KindPath, "client key file for NATS TLS", func(f *File) string { return natsOf(f).TLSKey }},
	{"clickhouse_dsn", "MCPWARDEN_CLICKHOUSE_DSN", "--clickhouse", KindDSN, "ClickHouse DSN (native protocol) for collect and query", func(f *File) string { return f.ClickHouse }},
}

// DefaultClickHouseDSN is clickhouse_dsn when nothing sets it: the
// single-host store.
const DefaultClickHouseDSN = "clickhouse://127.0.0.1:9000/mcpwarden"

func natsOf(f *File) *NATS {
	if f.NATS == nil {
		return &NATS{}
	}
	return f.NATS
}

// Source says where a value came from.
type Source string

const (
	SourceNone Source = ""        // not set: the command's built-in default applies
	SourceFile Source = "file"    // the configuration file
	SourceEnv  Source = "env"     // an MCPWARDEN_* variable
	SourceFlag Source = "flag"    // the command line (set by the command, see Override)
	SourceAuto Source = "default" // a default this package resolved (the file's path)
)

// Value is one setting as resolved.
type Value struct {
	Key    Key
	Value  string
	Source Source
}

// Shown is the value for a person: a DSN's or URL's password redacted.
func (v Value) Shown() string { return Redact(v.Key.Kind, v.Value) }

// Config is the host configuration as resolved from the file and the
// environment.
type Config struct {
	// Path is the configuration file looked for; Found says it existed.
	Path       string
	PathSource Source
	Found      bool
	values     map[string]Value
}

// Env reads one environment variable; os.Getenv in production.
type Env func(string) string

// DefaultPath is where the configuration file is looked for:
// $MCPWARDEN_CONFIG, else /etc/mcpwarden/config.json for root, else
// $XDG_CONFIG_HOME/mcpwarden/config.json (~/.config/mcpwarden/config.json).
func DefaultPath(env Env, euid int) (string, Source, error) {
	if p := env(EnvFile); p != "" {
		if !filepath.IsAbs(p) {
			return "", SourceEnv, fmt.Errorf("%s=%q: give an absolute path", EnvFile, p)
		}
		return filepath.Clean(p), SourceEnv, nil
	}
	if euid == 0 {
		return "/etc/mcpwarden/config.json", SourceAuto, nil
	}
	if d := env("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "mcpwarden", "config.json"), SourceAuto, nil
	}
	home := env("HOME")
	if !filepath.IsAbs(home) {
		return "", SourceAuto, errors.New("no configuration directory: set HOME or XDG_CONFIG_HOME (or MCPWARDEN_CONFIG)")
	}
	return filepath.Join(home, ".config", "mcpwarden", "config.json"), SourceAuto, nil
}

// Load resolves the configuration for a process with effective uid euid.
// A missing file at the default location is no configuration; a missing
// file named by MCPWARDEN_CONFIG, a file that does not parse, or one others
// could have written is an error.
func Load(env Env, euid int) (*Config, error) {
	path, src, err := DefaultPath(env, euid)
	if err != nil {
		return nil, err
	}
	c := &Config{Path: path, PathSource: src, values: map[string]Value{}}
	f, found, err := readFile(path, euid)
	if err != nil {
		return nil, err
	}
	if !found && src == SourceEnv {
		return nil, fmt.Errorf("%s=%s: no such file; create it or unset %s", EnvFile, path, EnvFile)
	}
	c.Found = found
	for _, k := range Keys {
		if v := k.get(f); v != "" {
			if err := check(k, v); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, k.Name, err)
			}
			c.values[k.Name] = Value{Key: k, Value: v, Source: SourceFile}
		}
		if v, ok := lookup(env, k.Env); ok {
			if err := check(k, v); err != nil {
				return nil, fmt.Errorf("%s: %w", k.Env, err)
			}
			c.values[k.Name] = Value{Key: k, Value: v, Source: SourceEnv}
		}
	}
	return c, nil
}

// lookup treats an empty variable as unset (a client's env block with an
// empty value should not turn a setting off).
func lookup(env Env, name string) (string, bool) {
	v := env(name)
	return v, v != ""
}

// Get returns a setting's value and where it came from ("" and SourceNone
// when neither the file nor the environment sets it).
func (c *Config) Get(name string) (string, Source) {
	v, ok := c.values[name]
	if !ok {
		if !slices.ContainsFunc(Keys, func(k Key) bool { return k.Name == name }) {
			panic("hostconfig: unknown key " + name)
		}
		return "", SourceNone
	}
	return v.Value, v.Source
}

// Values lists every setting, set or not, in the order of Keys.
func (c *Config) Values() []Value {
	out := make([]Value, 0, len(Keys))
	for _, k := range Keys {
		v, ok := c.values[k.Name]
		if !ok {
			v = Value{Key: k}
		}
		out = append(out, v)
	}
	return out
}

// readFile reads and checks the file at path. found is false when it does
// not exist.
func readFile(path string, euid int) (*File, bool, error) {
	fd, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &File{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("configuration file: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("configuration file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, false, fmt.Errorf("configuration file %s is not a regular file", path)
	}
	if err := checkOwner(path, st, euid); err != nil {
		return nil, false, err
	}
	data, err := io.ReadAll(io.LimitReader(fd, MaxFileSize+1))
	if err != nil {
		return nil, false, fmt.Errorf("configuration file: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, false, fmt.Errorf("configuration file %s is larger than %d bytes", path, MaxFileSize)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, false, fmt.Errorf("configuration file %s: %w", path, err)
	}
	if hasSecret(f) && st.Mode().Perm()&0o077 != 0 {
		return nil, false, fmt.Errorf("configuration file %s holds a password but others may read it (mode %04o): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	return f, true, nil
}

// checkOwner refuses a file (and a directory above it) that someone other
// than the user and root could have written: it decides which daemon the
// runs trust and which key hashes their paths.
func checkOwner(path string, st os.FileInfo, euid int) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("configuration file %s: cannot read its owner", path)
	}
	if sys.Uid != 0 && int(sys.Uid) != euid {
		return fmt.Errorf("configuration file %s is owned by uid %d, not by this user (%d) or root: refused, since it decides which daemon and key the runs trust", path, sys.Uid, euid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("configuration file %s is writable by group or others (mode %04o): chmod go-w %s", path, st.Mode().Perm(), path)
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		ds, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("configuration file: %w", err)
		}
		dsys, ok := ds.Sys().(*syscall.Stat_t)
		// A sticky directory (/tmp) may be shared: the file itself is
		// protected by its owner check.
		if ok && ds.Mode().Perm()&0o002 != 0 && ds.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("configuration file %s lies in %s, which anyone may write: move it", path, dir)
		}
		if ok && dsys.Uid != 0 && int(dsys.Uid) != euid && ds.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("configuration file %s lies in %s, which another user may write: move it", path, dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

// Parse strictly decodes a configuration file and checks every value.
func Parse(data []byte) (*File, error) {
	var f File
	if err := strictjson.Unmarshal(data, &f, strictjson.MaxDepth(4)); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			if se.Kind == strictjson.KindUnknownMember {
				return nil, fmt.Errorf("%s: unknown setting (names are case-sensitive; see docs/configuration.md)", se.Field())
			}
			if f := se.Field(); f != "" {
				return nil, fmt.Errorf("%s: %s", f, se.Reason)
			}
		}
		return nil, err
	}
	for _, k := range Keys {
		if v := k.get(&f); v != "" {
			if err := check(k, v); err != nil {
				return nil, fmt.Errorf("%s: %w", k.Name, err)
			}
		}
	}
	return &f, nil
}

func hasSecret(f *File) bool {
	for _, k := range Keys {
		if v := k.get(f); v != "" && Redact(k.Kind, v) != v {
			return true
		}
	}
	return false
}

// check validates one value of a key.
func check(k Key, v string) error {
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("contains a control character")
	}
	switch k.Kind {
	case KindSocket:
		if v == Off {
			return nil
		}
		fallthrough
	case KindPath:
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%q is not an absolute path", v)
		}
	case KindNATS:
		for _, u := range strings.Split(v, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") {
				u = "nats://" + u
			}
			p, err := url.Parse(u)
			if err != nil || p.Host == "" {
				return fmt.Errorf("%q is not a NATS URL (nats://HOST:PORT)", Redact(KindNATS, v))
			}
			switch p.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				return fmt.Errorf("NATS URL scheme %q: use nats:// or tls://", p.Scheme)
			}
		}
	case KindDSN:
		p, err := url.Parse(v)
		if err != nil || p.Host == "" {
			return errors.New("not a ClickHouse DSN (clickhouse://USER:PASSWORD@HOST:9000/DATABASE)")
		}
		if p.Scheme != "clickhouse" && p.Scheme != "tcp" {
			return fmt.Errorf("DSN scheme %q: use clickhouse:// (the native protocol)", p.Scheme)
		}
	case KindName:
		if strings.ContainsAny(v, " \t") {
			return fmt.Errorf("%q contains white space", v)
		}
	}
	return nil
}

// Redact hides the secrets of a value: the password of a URL or DSN and
// password-like query parameters. Other kinds are shown as they are.
func Redact(kind Kind, v string) string {
	if kind != KindDSN && kind != KindNATS {
		return v
	}
	parts := strings.Split(v, ",")
	for i, part := range parts {
		parts[i] = redactURL(kind, part)
	}
	return strings.Join(parts, ",")
}

func redactURL(kind Kind, s string) string {
	trimmed := strings.TrimSpace(s)
	withScheme := trimmed
	if !strings.Contains(trimmed, "://") {
		withScheme = "nats://" + trimmed
	}
	p, err := url.Parse(withScheme)
	if err != nil {
		// Unparsable: show nothing after a possible user part.
		if at := strings.LastIndex(s, "@"); at >= 0 {
			return "REDACTED" + s[at:]
		}
		return s
	}
	changed := false
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "REDACTED")
			changed = true
		} else if p.User.Username() != "" && kind == KindNATS {
			// nats://TOKEN@host: a bare user part of a NATS URL is a token.
			p.User = url.User("REDACTED")
			changed = true
		}
	}
	q := p.Query()
	for name := range q {
		l := strings.ToLower(name)
		if strings.Contains(l, "password") || strings.Contains(l, "secret") || strings.Contains(l, "token") || strings.Contains(l, "key") {
			q.Set(name, "REDACTED")
			changed = true
		}
	}
	if !changed {
		return s
	}
	p.RawQuery = q.Encode()
	out := p.String()
	if !strings.Contains(trimmed, "://") {
		out = strings.TrimPrefix(out, "nats://")
	}
	return out
}
