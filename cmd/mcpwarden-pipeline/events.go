package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/cli/natsconn"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

const eventsUsage = `usage: mcpwarden events [--follow] [--json] [--run RUN_ID] [--kind KIND] [--since DURATION] [NATS flags]

Prints the events in the JetStream stream for a person: every stored event
(or those of the last --since), then exits; with --follow, new events as they
arrive (after those of --since, when given) until interrupted.
Paths appear only as the first hex digits of their keyed hash. The daemon's
embedded NATS server takes only its own users: run this as root on the
daemon's host (it uses STATE_DIR/nats-auth/reader.nk), or give credentials.
`

func cmdEvents(ctx context.Context, args []string) int {
	fs := cli.NewFlags("events", eventsUsage)
	follow := fs.Bool("follow", false, "print new events live until interrupted")
	asJSON := fs.Bool("json", false, "print each event as one JSON line")
	run := fs.String("run", "", "only events of run `RUN_ID`")
	kind := fs.String("kind", "", "only events of `KIND` (file_op, landlock_denial, finding, health, launch, decision)")
	since := fs.Duration("since", 0, "only events stored in the last `DURATION` (e.g. 15m; default: all)")
	nf := cli.AddNATSFlags(fs.FlagSet, cli.DefaultNATS, "NATS `URL` (default the daemon's embedded server on this host)")
	stateDir := fs.String("state-dir", cli.DaemonStateDir, "the daemon's state `DIR`, where the embedded NATS server's credentials are (used when no NATS credential flag is given)")
	if err := fs.Parse(args); err != nil {
		return fs.Exit(err)
	}
	if err := cli.ApplyConfig(fs.FlagSet, cli.WithKeys(cli.DaemonStateKeys(map[string]string{}))); err != nil {
		return cli.ConfigFail(err)
	}
	if fs.NArg() > 0 {
		return fs.UsageError("unexpected argument %q", fs.Arg(0))
	}
	if *kind != "" && !slices.Contains(schema.Kinds, schema.Kind(*kind)) {
		fmt.Fprintf(os.Stderr, "mcpwarden events: unknown --kind %q; use one of %v\n", *kind, schema.Kinds)
		return cli.ExitUsage
	}
	opts, err := natsconn.Options(nf, stream.RoleReader, schema.LocalOrigin().Host, "mcpwarden-events", *stateDir)
	if err != nil {
		return cli.Fail(cli.ExitUsage, err)
	}
	nc, err := stream.Connect(opts, nats.RetryOnFailedConnect(false))
	if err != nil {
		return cli.Fail(cli.ExitInternal, cli.AuthHint(err, nf))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return cli.Fail(cli.ExitInternal, fmt.Errorf("JetStream: %w", err))
	}
	subject := stream.AllSubjects
	if *kind != "" {
		subject = stream.SubjectPrefix + ".*." + *kind
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case *since > 0:
		from := time.Now().Add(-*since)
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	case *follow:
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	p := &eventPrinter{w: os.Stdout, json: *asJSON, run: *run}
	show := func(msg jetstream.Msg) error {
		events, _, err := stream.DecodeBatch(msg.Subject(), msg.Data())
		if err != nil {
			return nil
		}
		for i := range events {
			p.print(&events[i])
		}
		return nil
	}
	if !*follow {
		// To the stream's end as it is now, as the server counts it: a
		// stall (the server or this process stopped, a loaded host) is
		// waited out or named, never taken for the end (before, two
		// seconds without a message ended the listing, silently short).
		err := stream.ReadToEnd(ctx, js, cc, show)
		switch {
		case ctx.Err() != nil:
			return cli.ExitOK
		case err != nil:
			return cli.Fail(cli.ExitInternal, fmt.Errorf("read events at %s: %w (is 'mcpwarden daemon' running, or pass --nats URL)", stream.RedactURL(nf.URL), err))
		}
		return cli.ExitOK
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := js.OrderedConsumer(sctx, stream.Name, cc)
	cancel()
	if err != nil {
		return cli.Fail(cli.ExitInternal, fmt.Errorf("read stream %s at %s: %w (is 'mcpwarden daemon' running, or pass --nats URL)", stream.Name, stream.RedactURL(nf.URL), err))
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Hour))
		if ctx.Err() != nil {
			return cli.ExitOK
		}
		if err != nil {
			continue
		}
		_ = show(msg)
	}
}

// eventPrinter writes events for a person or as JSON lines.
type eventPrinter struct {
	w    io.Writer
	json bool
	run  string
}

func (p *eventPrinter) print(e *schema.Event) {
	if p.run != "" && e.RunID != p.run {
		return
	}
	if p.json {
		b, err := json.Marshal(e)
		if err == nil {
			fmt.Fprintf(p.w, "%s\n", b)
		}
		return
	}
	fmt.Fprintln(p.w, formatEvent(e))
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// formatEvent renders one line per event: time, kind, run, and the body's
// essentials. Every value printed was validated as a token or number.
func formatEvent(e *schema.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-15s run=%-8s", time.Unix(0, e.TimeNS).Format("15:04:05.000"), e.Kind, short(e.RunID, 8))
	switch {
	case e.FileOp != nil:
		f := e.FileOp
		fmt.Fprintf(&b, " %-9s %-6s %-17s %-9s result=%d pid=%d comm=%s path=%s", f.Verdict, f.FlagsClass, f.Syscall, f.PathClass, f.Result, f.PID, f.Comm, short(string(f.PathHash), 12))
	case e.LandlockDenial != nil:
		l := e.LandlockDenial
		fmt.Fprintf(&b, " domain=%s blockers=%s class=%s path=%s", l.Domain, strings.Join(l.Blockers, ","), l.PathClass, short(string(l.PathHash), 12))
	case e.Finding != nil:
		f := e.Finding
		status := string(f.Status)
		if status == "" {
			status = "final"
		}
		fmt.Fprintf(&b, " %s %s severity=%s reason=%s", f.Type, status, f.Severity, f.Reason)
		if f.Tool != "" {
			fmt.Fprintf(&b, " tool=%s", f.Tool)
		}
		if f.PathHash != "" {
			fmt.Fprintf(&b, " class=%s path=%s", f.PathClass, short(string(f.PathHash), 12))
		}
		fmt.Fprintf(&b, " evidence=%d", len(f.EvidenceIDs))
	case e.Health != nil:
		h := e.Health
		fmt.Fprintf(&b, " %s hooks=%d landlock_abi=%d audit=%s drops(bpf=%d queue=%d publish=%d kernel_audit=%d)", h.Component, len(h.Hooks), h.LandlockABI, h.AuditStream, h.DropsBPFReserve, h.DropsQueueFull, h.DropsPublishFail, h.DropsKernelAudit)
	case e.Launch != nil:
		l := e.Launch
		fmt.Fprintf(&b, " %s mode=%s abi=%d degraded=%v", l.Phase, l.Mode, l.LandlockABI, l.Degraded)
		if l.ServerName != "" {
			fmt.Fprintf(&b, " server=%s version=%s era=%s", l.ServerName, l.ServerVersion, l.ProtocolEra)
		}
		if l.Phase == schema.PhaseExit {
			fmt.Fprintf(&b, " exit=%d", l.ExitStatus)
		}
	case e.Decision != nil:
		d := e.Decision
		fmt.Fprintf(&b, " %s %s tool=%s class=%s error=%s", d.Decision, d.Method, d.Tool, d.ActionClass, d.ErrorCode)
	}
	return b.String()
}
