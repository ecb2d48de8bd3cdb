package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/schema"
)

const configUsage = `usage: mcpwarden config show [--json]

Prints the effective host configuration: each setting with its value (a
password in a DSN or URL shown as REDACTED) and where it comes from (a
command-line flag overrides the environment, the environment the file, the
file the built-in default). The file is $MCPWARDEN_CONFIG, else
/etc/mcpwarden/config.json for root, else
$XDG_CONFIG_HOME/mcpwarden/config.json (~/.config/mcpwarden/config.json);
see docs/configuration.md. It also says whether a daemon answers at the
socket a run would use, and whether its path key is this user's.

Exit status: 0; 78 the configuration cannot be used (the message says why).
`

func cmdConfig(ctx context.Context, args []string) int {
	if code, ok := cli.Subcommand("config", "show", configUsage, args); !ok {
		return code
	}
	fs := cli.NewFlags("config show", configUsage)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := fs.Parse(args[1:]); err != nil {
		return fs.Exit(err)
	}
	if fs.NArg() > 0 {
		return fs.UsageError("takes no arguments")
	}
	cfg, err := cli.HostConfig()
	if err != nil {
		return cli.ConfigFail(err)
	}
	rep := effectiveConfig(ctx, cfg)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
		return cli.ExitOK
	}
	rep.writeText(os.Stdout)
	return cli.ExitOK
}

// configReport is what `config show` prints.
type configReport struct {
	File     string          `json:"file"`
	Found    bool            `json:"found"`
	Settings []configSetting `json:"settings"`
	Daemon   daemonReport    `json:"daemon"`
}

type configSetting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`  // effective, redacted; "" when the command's default applies
	Source string `json:"source"` // file, env, default
	Env    string `json:"env"`
	Note   string `json:"note,omitempty"`
}

// daemonReport is what a run would do about the daemon.
type daemonReport struct {
	Socket      string `json:"socket"`
	Use         string `json:"use"` // required, discovered, none, off
	Answers     bool   `json:"answers"`
	Error       string `json:"error,omitempty"`
	KeyID       string `json:"path_key_id,omitempty"`       // the daemon's
	LocalKeyID  string `json:"local_path_key_id,omitempty"` // this user's
	KeyMismatch bool   `json:"path_key_mismatch,omitempty"` // a run would be refused
	LocalKeyErr string `json:"local_path_key_error,omitempty"`
}

func effectiveConfig(ctx context.Context, cfg *hostconfig.Config) *configReport {
	rep := &configReport{File: cfg.Path, Found: cfg.Found}
	stateDir, _ := cfg.Get("state_dir")
	if stateDir == "" {
		stateDir, _ = auditlog.DefaultStateDir()
	}
	for _, v := range cfg.Values() {
		s := configSetting{Name: v.Key.Name, Value: v.Shown(), Source: string(v.Source), Env: v.Key.Env}
		if v.Source == hostconfig.SourceNone {
			s.Source = "default"
			switch v.Key.Name {
			case "state_dir":
				s.Value = stateDir
			case "daemon_socket":
				s.Value = client.DefaultSocket
				s.Note = "used when a daemon's socket is there (discovered); 'off' turns that off"
			case "path_key":
				s.Value = filepath.Join(stateDir, "path.key")
			case "nats.url":
				s.Note = "run publishes to no NATS; daemon runs its embedded server; events and collect use " + cli.DefaultNATS
			case "clickhouse_dsn":
				s.Value = hostconfig.DefaultClickHouseDSN
			}
		}
		rep.Settings = append(rep.Settings, s)
	}
	keyFile, _ := cfg.Get("path_key")
	if keyFile == "" {
		keyFile = filepath.Join(stateDir, "path.key")
	}
	rep.Daemon = probeDaemon(ctx, cfg, keyFile)
	return rep
}

// probeDaemon says which daemon a run would register with, asks it for
// its key id and compares it with this user's key (read, never created).
func probeDaemon(ctx context.Context, cfg *hostconfig.Config, keyFile string) daemonReport {
	socket, src := cfg.Get("daemon_socket")
	d := daemonReport{Socket: socket, Use: "required"}
	switch {
	case socket == hostconfig.Off:
		d.Use = "off"
		return d
	case src == hostconfig.SourceNone:
		d.Socket = client.DefaultSocket
		found, err := runcmd.DiscoverDaemon(d.Socket)
		switch {
		case err != nil:
			d.Use, d.Error = "discovered", err.Error()
			return d
		case !found:
			d.Use = "none"
			return d
		}
		d.Use = "discovered"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	info, err := client.New(d.Socket).Info(ctx)
	if err != nil {
		d.Error = err.Error()
		return d
	}
	d.Answers, d.KeyID = true, info.PathKeyID
	key, err := os.ReadFile(keyFile)
	if err != nil {
		d.LocalKeyErr = err.Error()
		return d
	}
	h, err := schema.NewPathHasher(key)
	if err != nil {
		d.LocalKeyErr = err.Error()
		return d
	}
	d.LocalKeyID = h.KeyID()
	d.KeyMismatch = d.LocalKeyID != d.KeyID
	return d
}

func (r *configReport) writeText(w io.Writer) {
	state := "not found: built-in defaults"
	if r.Found {
		state = "read"
	}
	fmt.Fprintf(w, "configuration file: %s (%s)\n\n", r.File, state)
	fmt.Fprintf(w, "  %-19s %-8s %s\n", "setting", "source", "value")
	for _, s := range r.Settings {
		v := s.Value
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(w, "  %-19s %-8s %s\n", s.Name, s.Source, v)
		if s.Note != "" {
			fmt.Fprintf(w, "  %-19s %-8s (%s)\n", "", "", s.Note)
		}
	}
	fmt.Fprintln(w, "\nenvironment variables: MCPWARDEN_CONFIG names the file; each setting's variable:")
	for _, s := range r.Settings {
		fmt.Fprintf(w, "  %-19s $%s\n", s.Name, s.Env)
	}
	d := r.Daemon
	fmt.Fprintf(w, "\ndaemon for 'mcpwarden run': ")
	switch {
	case d.Use == "off":
		fmt.Fprintln(w, "off (runs are not registered)")
		return
	case d.Use == "none":
		fmt.Fprintf(w, "none (no socket at %s; runs are not registered)\n", d.Socket)
		return
	case !d.Answers:
		fmt.Fprintf(w, "%s at %s, NOT answering: runs are refused\n  %s\n", d.Use, d.Socket, d.Error)
		return
	}
	fmt.Fprintf(w, "%s at %s, answering; runs register there and refuse to start if it refuses\n", d.Use, d.Socket)
	switch {
	case d.LocalKeyErr != "":
		fmt.Fprintf(w, "  daemon's path key %s; this user's key cannot be read (%s): runs are refused\n", d.KeyID, d.LocalKeyErr)
	case d.KeyMismatch:
		fmt.Fprintf(w, "  PATH KEY MISMATCH: the daemon's is %s, this user's %s: runs are refused; set path_key to the daemon's key file\n", d.KeyID, d.LocalKeyID)
	default:
		fmt.Fprintf(w, "  path key %s, the same as the daemon's\n", d.KeyID)
	}
}
