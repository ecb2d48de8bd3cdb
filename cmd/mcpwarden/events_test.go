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
	for _, c := range []struct {
		e    schema.Event
		want string
	}{
		{fileOp, "05:00:00.000 file_op         run=01234567 blocked_by_kernel read   openat            outside   result=-13 pid=42 comm=node path=abababababab"},
		{health, "05:00:00.000 health          run=         daemon hooks=2 landlock_abi=7 audit=on drops(bpf=3 queue=0 publish=0)"},
		{denial, "05:00:00.000 landlock_denial run=01234567 domain=1a blockers=fs.read_file class=outside path="},
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
