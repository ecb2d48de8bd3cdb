package cli

import (
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/mcpwarden/mcpwarden/hostconfig"
)

// HostConfig is the host configuration (file and MCPWARDEN_* variables),
// read once per process.
var HostConfig = sync.OnceValues(func() (*hostconfig.Config, error) {
	return hostconfig.Load(os.Getenv, os.Geteuid())
})

// ApplyConfig sets, for each configuration key a command takes, the flag
// named in keys to the configured value unless the command line set it:
// flags override the environment, which overrides the file.
func ApplyConfig(fs *flag.FlagSet, keys map[string]string) error {
	cfg, err := HostConfig()
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for key, name := range keys {
		v, src := cfg.Get(key)
		if src == hostconfig.SourceNone || given[name] {
			continue
		}
		if fs.Lookup(name) == nil {
			panic("ApplyConfig: no flag --" + name)
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%s (from %s): %w", key, SourceName(cfg, key), err)
		}
	}
	return nil
}

// SourceName says where a key's value came from, for a person.
func SourceName(cfg *hostconfig.Config, key string) string {
	_, src := cfg.Get(key)
	switch src {
	case hostconfig.SourceEnv:
		for _, k := range hostconfig.Keys {
			if k.Name == key {
				return "$" + k.Env
			}
		}
	case hostconfig.SourceFile:
		return cfg.Path
	}
	return string(src)
}

// NATSConfigKeys maps the NATS settings to the flags of AddNATSFlags.
var NATSConfigKeys = map[string]string{
	"nats.url": "nats", "nats.creds": "nats-creds", "nats.nkey": "nats-nkey", "nats.user": "nats-user",
	"nats.password_file": "nats-password-file", "nats.tls_ca": "nats-tls-ca", "nats.tls_cert": "nats-tls-cert", "nats.tls_key": "nats-tls-key",
}

// WithKeys returns NATSConfigKeys plus more.
func WithKeys(more map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range NATSConfigKeys {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// DaemonStateKeys adds state_dir for commands whose --state-dir is the
// daemon's (where the embedded NATS server's keys are): root's
// configuration describes the host's daemon, a user's their own runs.
func DaemonStateKeys(keys map[string]string) map[string]string {
	if os.Geteuid() == 0 {
		keys["state_dir"] = "state-dir"
	}
	return keys
}

// ConfigFail is the exit for a configuration that cannot be read or used.
func ConfigFail(err error) int {
	return Fail(ExitConfig, fmt.Errorf("configuration: %w (see 'mcpwarden config show')", err))
}
