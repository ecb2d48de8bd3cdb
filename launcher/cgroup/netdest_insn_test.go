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
	port := func(p uint16) int32 { return int32(binary.NativeEndian.Uint16([]byte{byte(p >> 8), byte(p)})) }
	verdicts := append(ret(1), ret(0)...)
	concat := func(parts ...[]insn) []insn {
		var out []insn
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// exact: the words of one address; the next check is 7 instructions
	// on, deny is toDeny past the last.
	exact := func(w0, w1, w2, w3 int32, toDeny int16) []insn {
		return []insn{jne(2, w0, 6), ld(3, 12), jne(3, w1, 4), ld(3, 16), jne(3, w2, 2), ld(3, 20), jeq(3, w3, toDeny)}
	}
	// v4in6: the first three words of an IPv4-carrying form, then
	// inet4's checks on the last; toDeny from its first IPv4 check.
	v4in6 := func(w0, w1, w2 int32, toDeny, toAllow int16) []insn {
		return []insn{
			jne(2, w0, 14), ld(3, 12), jne(3, w1, 12), ld(3, 16), jne(3, w2, 10), ld(3, 20),
			mov(4, 3), and(4, le(0xff, 0xff, 0, 0)), jeq(4, le(169, 254, 0, 0), toDeny), // 169.254/16: deny
			jeq(3, le(100, 100, 100, 200), toDeny-1), // Alibaba Cloud's metadata: deny
			jeq(3, le(192, 0, 0, 192), toDeny-2),     // Oracle Cloud Classic's: deny
			jne(3, le(168, 63, 129, 16), toAllow+3),  // not Azure's WireServer: allow
			ld(5, 24),
			jne(5, port(53), toAllow+3), // the WireServer but its DNS: deny
			ja(toAllow),                 // its DNS: allow
		}
	}
	// The inet6 program: the local-use NAT64 checks from n, its verdicts:
	// allow at 149, deny at 151.
	const n, allow, deny = 93, 149, 151
	lsh := func(dst uint8, imm int32) insn { return insn{Op: 0x64, Regs: dst, Imm: imm} }
	rsh := func(dst uint8, imm int32) insn { return insn{Op: 0x74, Regs: dst, Imm: imm} }
	or := func(dst, src uint8) insn { return insn{Op: 0x4c, Regs: dst | src<<4} }
	// denyV4At: inet4's checks on reg at instruction at, going on at pass.
	denyV4At := func(reg uint8, at, pass int16) []insn {
		return []insn{
			mov(4, reg), and(4, le(0xff, 0xff, 0, 0)), jeq(4, le(169, 254, 0, 0), deny-(at+2)-1),
			jeq(reg, le(100, 100, 100, 200), deny-(at+3)-1),
			jeq(reg, le(192, 0, 0, 192), deny-(at+4)-1),
			jne(reg, le(168, 63, 129, 16), pass-(at+5)-1),
			ld(5, 24),
			jne(5, port(53), deny-(at+7)-1),
		}
	}
	tests := []struct {
		name string
		got  []insn
		want []insn
	}{
		{"inet4", inet4Prog(), append([]insn{
			ld(2, 4),                          // w2 = user_ip4
			mov(4, 2),                         // r4 = r2
			and(4, le(0xff, 0xff, 0, 0)),      // /16
			jeq(4, le(169, 254, 0, 0), 8),     // 169.254/16: deny
			jeq(2, le(100, 100, 100, 200), 7), // Alibaba Cloud's metadata: deny
			jeq(2, le(192, 0, 0, 192), 6),     // Oracle Cloud Classic's metadata: deny
			jne(2, le(168, 63, 129, 16), 3),   // not Azure's WireServer: allow
			ld(5, 24),                         // w5 = user_port
			jne(5, port(53), 3),               // the WireServer but its DNS: deny
			ja(0),                             // allow
		}, verdicts...)},
		{"inet6", inet6Prog(), concat([]insn{
			ld(2, 8),                               // w2 = user_ip6[0]
			mov(3, 2),                              // r3 = r2
			and(3, le(0xff, 0xc0, 0, 0)),           // /10
			jeq(3, le(0xfe, 0x80, 0, 0), deny-3-1), // fe80::/10: deny
			jeq(2, le(0xfd, 0x00, 0x0e, 0xc2), deny-4-1), // fd00:ec2::/32: deny
		},
			// fd20:ce::254, fd00:c1::a9fe:a9fe, fd00:42::42, fd00:a9fe:a9fe::1
			exact(le(0xfd, 0x20, 0x00, 0xce), 0, 0, le(0, 0, 2, 0x54), deny-11-1),
			exact(le(0xfd, 0x00, 0x00, 0xc1), 0, 0, le(0xa9, 0xfe, 0xa9, 0xfe), deny-18-1),
			exact(le(0xfd, 0x00, 0x00, 0x42), 0, 0, le(0, 0, 0, 0x42), deny-25-1),
			exact(le(0xfd, 0x00, 0xa9, 0xfe), le(0xa9, 0xfe, 0, 0), 0, le(0, 0, 0, 1), deny-32-1),
			// ::ffff:a.b.c.d, 64:ff9b::a.b.c.d, ::ffff:0:a.b.c.d (SIIT) and
			// ::a.b.c.d (IPv4-compatible): what inet4 refuses
			v4in6(0, 0, le(0, 0, 0xff, 0xff), deny-41-1, allow-47-1),
			v4in6(le(0, 0x64, 0xff, 0x9b), 0, 0, deny-56-1, allow-62-1),
			v4in6(0, 0, le(0xff, 0xff, 0, 0), deny-71-1, allow-77-1),
			v4in6(0, 0, 0, deny-86-1, allow-92-1),
			// 64:ff9b:1::/48 (session 12): every layout of a prefix in it.
			[]insn{
				jne(2, le(0, 0x64, 0xff, 0x9b), allow-n-1), // not 64:ff9b::/32: allow
				ld(6, 12),                             // w6 = user_ip6[1]
				mov(3, 6),                             // r3 = r6
				and(3, le(0xff, 0xff, 0, 0)),          // its first 16 bits
				jne(3, le(0, 1, 0, 0), allow-(n+4)-1), // not 64:ff9b:1::/48: allow
				ld(7, 16),                             // w7 = user_ip6[2]
				ld(3, 20),                             // /96: w3 = user_ip6[3]
				mov(8, 3),                             // r8 = r3
			},
			denyV4At(3, n+8, n+16),
			[]insn{lsh(8, 24), mov(3, 7), rsh(3, 8), or(3, 8)}, // /64: bytes 9-12
			denyV4At(3, n+20, n+28),
			[]insn{mov(3, 6), rsh(3, 24), mov(8, 7), and(8, le(0, 0xff, 0xff, 0xff)), or(3, 8)}, // /56: bytes 7, 9-11
			denyV4At(3, n+33, n+41),
			[]insn{mov(3, 6), rsh(3, 16), mov(8, 7), rsh(8, 8), lsh(8, 16), or(3, 8)}, // /48: bytes 6-7, 9-10
			denyV4At(3, n+47, allow),
			[]insn{ja(0)},
			verdicts)},
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
