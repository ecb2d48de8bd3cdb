package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

func TestFormatEvent(t *testing.T) {
	o := schema.Origin{Host: "h", BootID: "b"}
	at := time.Date(2026, 11, 30, 5, 0, 0, 0, time.Local)
	fileOp := o.NewEvent(schema.KindFileOp, "0123456789abcdef", "s", "", at)
	fileOp.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: "read", Result: -13, PathHash: schema.PathHash(strings.Repeat("ab", 32)),
		PathClass: schema.PathOutside, Verdict: "blocked_by_kernel", PID: 42, Comm: "node"}
	health := o.NewEvent(schema.KindHealth, "", "", "", at)
	health.Health = &schema.Health{Component: "daemon", Hooks: []string{"a", "b"}, LandlockABI: 7, AuditStream: "on", DropsBPFReserve: 3}
	denial := o.NewEvent(schema.KindLandlockDenial, "0123456789abcdef", "s", "", at)
	denial.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathClass: schema.PathOutside}
	finding := o.NewEvent(schema.KindFinding, "0123456789abcdef", "s", "", at)
	finding.Finding = &schema.Finding{Type: schema.FindingEscape, Severity: schema.SeverityCritical, Reason: "succeeded_outside_scope",
		EvidenceIDs: []string{schema.NewID()}, Tool: "read_text_file", PathHash: schema.PathHash(strings.Repeat("cd", 32)), PathClass: schema.PathOutside,
		Status: schema.StatusProvisional}
	final := finding
	final.Finding = &schema.Finding{Type: schema.FindingBlockedAttempt, Severity: schema.SeverityLow, Reason: "kernel_denied_at_startup", EvidenceIDs: []string{}}
	launch := o.NewEvent(schema.KindLaunch, "0123456789abcdef", "s", "", at)
	launch.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeEnforce, LandlockABI: 7, ServerName: "secure-filesystem-server", ServerVersion: "0.2.0", ProtocolEra: "legacy"}
	for _, c := range []struct {
		e    schema.Event
		want string
	}{
		{fileOp, "05:00:00.000 file_op         run=01234567 blocked_by_kernel read   openat            outside   result=-13 pid=42 comm=node path=abababababab"},
		{health, "05:00:00.000 health          run=         daemon hooks=2 landlock_abi=7 audit=on drops(bpf=3 queue=0 publish=0 kernel_audit=0)"},
		{denial, "05:00:00.000 landlock_denial run=01234567 domain=1a blockers=fs.read_file class=outside path="},
		{finding, "05:00:00.000 finding         run=01234567 ESCAPE provisional severity=critical reason=succeeded_outside_scope tool=read_text_file class=outside path=cdcdcdcdcdcd evidence=1"},
		{final, "05:00:00.000 finding         run=01234567 BLOCKED_ATTEMPT final severity=low reason=kernel_denied_at_startup evidence=0"},
		{launch, "05:00:00.000 launch          run=01234567 identified mode=enforce abi=7 degraded=false server=secure-filesystem-server version=0.2.0 era=legacy"},
	} {
		if got := formatEvent(&c.e); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
	var buf bytes.Buffer
	p := &eventPrinter{w: &buf, json: true, run: "other"}
	p.print(&fileOp)
	if buf.Len() != 0 {
		t.Errorf("--run filter printed %s", buf.String())
	}
	p.run = fileOp.RunID
	p.print(&fileOp)
	if !strings.Contains(buf.String(), `"verdict":"blocked_by_kernel"`) {
		t.Errorf("--json printed %s", buf.String())
	}
}
