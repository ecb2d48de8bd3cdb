package runcmd

import (
	"context"
	"errors"
	"flag"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/launcher"
)

// Publish makes the sink that publishes the run's launch and decision
// records to NATS JetStream (nf.URL is set), spooling at most spoolMax
// bytes on disk while NATS is away. mcpwarden does not link the NATS client
// (every server start would pay for its start-up): its Publish execs
// mcpwarden-pipeline, whose Publish connects.
type Publish func(ctx context.Context, rc *Context, nf *cli.NATSFlags, spoolMax int64) (launcher.Sink, error)

// natsExtension adds --nats to `run`: launch and decision records also
// go to NATS JetStream through the publisher (spooling to
// STATE_DIR/spool/run-RUN_ID while NATS is away). A full spool makes the
// sink refuse records, which the launcher and proxy turn into refusing the
// run or denying calls (fail closed).
type natsExtension struct {
	nf       *cli.NATSFlags
	spoolMax int64
	publish  Publish
}

func (e *natsExtension) Flags(fs *flag.FlagSet) {
	e.nf = cli.AddNATSFlags(fs, "", "also publish launch and decision records to NATS JetStream at `URL` (e.g. nats://127.0.0.1:4222; as the host's publisher: on the daemon's embedded server that needs root)")
	fs.Int64Var(&e.spoolMax, "spool-max-bytes", 64<<20, "bound of the on-disk spool used while NATS is unreachable; when full, new calls are denied")
}

// ownFiles are the credential files the publisher reads (only when it
// publishes): a server that read one could publish forged records.
func (e *natsExtension) ownFiles() []ownFile {
	if e.nf.URL == "" {
		return nil
	}
	var own []ownFile
	for _, f := range []struct{ path, flag string }{{e.nf.Creds, "--nats-creds"}, {e.nf.NKey, "--nats-nkey"},
		{e.nf.PasswordFile, "--nats-password-file"}, {e.nf.Key, "--nats-tls-key"}} {
		own = append(own, ownFile{f.path, f.flag, "put it elsewhere", false})
	}
	return own
}

func (e *natsExtension) Configure(ctx context.Context, rc *Context) error {
	if e.nf.URL == "" {
		return nil
	}
	if rc.Config.Sink != nil {
		// The daemon publishes the run's records. A NATS server named by the
		// configuration is for the other commands (events, collect); one
		// named on the command line is a contradiction.
		if rc.Given["nats"] {
			return errors.New("--nats and --daemon-socket: with a daemon the run's records go through it, drop --nats")
		}
		return nil
	}
	launcher.WarmRecordJSON() // the publisher encodes them with encoding/json
	sink, err := e.publish(ctx, rc, e.nf, e.spoolMax)
	if err != nil {
		return err
	}
	rc.Config.Sink = sink
	return nil
}
