package cgroup

import (
	"encoding/binary"
	"testing"
)

// TestNetDestInstructions pins the filter's programs instruction by
// instruction (the kernel test, TestDenyLinkLocal, shows what they do).
func TestNetDestInstructions(t *testing.T) {
	// The constants are the addresses' bytes read the host's way.
	le := func(b ...byte) int32 { return int32(binary.NativeEndian.Uint32(b)) }
	ld := func(dst uint8, off int16) insn { return insn{Op: 0x61, Regs: dst | 1<<4, Off: off} }
	and := func(dst uint8, imm int32) insn { return insn{Op: 0x54, Regs: dst, Imm: imm} }
	jeq := func(dst uint8, imm int32, off int16) insn { return insn{Op: 0x16, Regs: dst, Imm: imm, Off: off} }
	jne := func(dst uint8, imm int32, off int16) insn { return insn{Op: 0x56, Regs: dst, Imm: imm, Off: off} }
	ja := func(off int16) insn { return insn{Op: 0x05, Off: off} }
	mov := func(dst, src uint8) insn { return insn{Op: 0xbf, Regs: dst | src<<4} }
	ret := func(v int32) []insn { return []insn{{Op: 0xb7, Imm: v}, {Op: 0x95}} }
	verdicts := append(ret(1), ret(0)...)
	port := func(p uint16) int32 { return int32(binary.NativeEndian.Uint16([]byte{byte(p >> 8), byte(p)})) }
	tests := []struct {
		name string
		got  []insn
		want []insn
	}{
		{"inet4", inet4Prog(), append([]insn{
			ld(2, 4),                          // w2 = user_ip4
			mov(4, 2),                         // r4 = r2
			and(4, le(0xff, 0xff, 0, 0)),      // /16
			jeq(4, le(169, 254, 0, 0), 7),     // 169.254/16: deny
			jeq(2, le(100, 100, 100, 200), 6), // Alibaba Cloud's metadata: deny
			jne(2, le(168, 63, 129, 16), 3),   // not Azure's WireServer: allow
			ld(5, 24),                         // w5 = user_port
			jne(5, port(53), 3),               // the WireServer but its DNS: deny
			ja(0),                             // allow
		}, verdicts...)},
		{"inet6", inet6Prog(), append([]insn{
			ld(2, 8),                              // w2 = user_ip6[0]
			mov(3, 2),                             // r3 = r2
			and(3, le(0xff, 0xc0, 0, 0)),          // /10
			jeq(3, le(0xfe, 0x80, 0, 0), 24),      // fe80::/10: deny
			jne(2, le(0xfd, 0x00, 0x0e, 0xc2), 7), // not fd00:ec2:: → mapped
			ld(3, 12), jne(3, 0, 19),
			ld(3, 16), jne(3, 0, 17),
			ld(3, 20), jeq(3, le(0, 0, 2, 0x54), 17), // fd00:ec2::254: deny
			ja(14),
			jne(2, 0, 13), // mapped: ::ffff:a.b.c.d
			ld(3, 12), jne(3, 0, 11),
			ld(3, 16), jne(3, le(0, 0, 0xff, 0xff), 9),
			ld(3, 20),
			mov(4, 3), and(4, le(0xff, 0xff, 0, 0)), jeq(4, le(169, 254, 0, 0), 7), // 169.254/16: deny
			jeq(3, le(100, 100, 100, 200), 6), // Alibaba Cloud's metadata: deny
			jne(3, le(168, 63, 129, 16), 3),   // not Azure's WireServer: allow
			ld(5, 24),
			jne(5, port(53), 3), // the WireServer but its DNS: deny
			ja(0),
		}, verdicts...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.got) != len(tc.want) {
				t.Fatalf("%d instructions, want %d:\n%+v", len(tc.got), len(tc.want), tc.got)
			}
			for i := range tc.want {
				if tc.got[i] != tc.want[i] {
					t.Errorf("instruction %d: %+v, want %+v", i, tc.got[i], tc.want[i])
				}
			}
		})
	}
	if len(netDestProgs) != 4 {
		t.Fatalf("%d programs, want connect4, connect6, sendmsg4, sendmsg6", len(netDestProgs))
	}
}
