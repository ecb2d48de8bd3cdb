package probes

import (
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// BenchmarkHookFloor measures the cost any syscall hook adds on this kernel,
// with programs that do nothing: the floor under BenchmarkOpenClose.
func BenchmarkHookFloor(b *testing.B) {
	testenv.RequireRoot(b)
	path := benchFile(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.Run("none", func(b *testing.B) { openClose(b, path) })
	ret := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	// cilium/ebpf finds syscall tracepoint ids in tracefs.
	if _, err := os.Stat("/sys/kernel/tracing/events"); err != nil {
		if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
			b.Fatalf("mount tracefs: %v", err)
		}
	}
	rp, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL", Instructions: ret})
	if err != nil {
		b.Fatal(err)
	}
	l1, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: rp})
	if err != nil {
		b.Fatal(err)
	}
	l2, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: rp})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("raw_tp_trivial", func(b *testing.B) { openClose(b, path) })
	l1.Close()
	l2.Close()
	tp, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, License: "GPL", Instructions: ret})
	if err != nil {
		b.Fatal(err)
	}
	l3, err := link.Tracepoint("syscalls", "sys_enter_openat", tp, nil)
	if err != nil {
		b.Fatal(err)
	}
	l4, err := link.Tracepoint("syscalls", "sys_exit_openat", tp, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("tp_trivial", func(b *testing.B) { openClose(b, path) })
	l3.Close()
	l4.Close()
}
