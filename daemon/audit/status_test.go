package audit

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// statusBytes builds an audit_status payload of n bytes with the given
// field values.
func statusBytes(n int, fields map[int]uint32) []byte {
	b := make([]byte, n)
	for off, v := range fields {
		binary.NativeEndian.PutUint32(b[off:], v)
	}
	return b
}

func TestParseStatus(t *testing.T) {
	full := map[int]uint32{statusEnabled: 1, statusFailure: 1, statusPID: 4242, statusRateLimit: 0, statusBacklogLimit: 64, statusLost: 56569, statusBacklog: 3}
	want := Status{Enabled: 1, Failure: 1, PID: 4242, BacklogLimit: 64, Lost: 56569, Backlog: 3}
	for _, tc := range []struct {
		name string
		b    []byte
		want Status
		err  bool
	}{
		{"6.x (44 bytes)", statusBytes(44, full), want, false},
		{"3.12 (40 bytes)", statusBytes(40, full), want, false},
		{"old (32 bytes)", statusBytes(32, full), want, false},
		{"future (64 bytes)", statusBytes(64, full), want, false},
		{"short (31 bytes)", statusBytes(31, map[int]uint32{}), Status{}, true},
		{"empty", nil, Status{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatus(tc.b)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseStatus = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// nlmsg builds one netlink message (header and payload, padded to 4).
func nlmsg(typ uint16, payload []byte) []byte {
	l := nlmsgHdrLen + len(payload)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint32(b[0:4], uint32(l))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	copy(b[nlmsgHdrLen:], payload)
	return b
}

func errPayload(errno int32) []byte {
	b := make([]byte, 4+nlmsgHdrLen)
	binary.NativeEndian.PutUint32(b, uint32(errno))
	return b
}

func TestParseAnswer(t *testing.T) {
	status := statusBytes(44, map[int]uint32{statusLost: 7})
	for _, tc := range []struct {
		name       string
		typ        uint16
		b          []byte
		wantStatus bool
		done       bool
		err        error
	}{
		{"get: ack then status", auditGet, append(nlmsg(unix.NLMSG_ERROR, errPayload(0)), nlmsg(auditGet, status)...), true, true, nil},
		{"get: ack alone", auditGet, nlmsg(unix.NLMSG_ERROR, errPayload(0)), false, false, nil},
		{"get: status alone", auditGet, nlmsg(auditGet, status), true, true, nil},
		{"set: ack", auditSet, nlmsg(unix.NLMSG_ERROR, errPayload(0)), false, true, nil},
		{"set: EPERM", auditSet, nlmsg(unix.NLMSG_ERROR, errPayload(-int32(unix.EPERM))), false, false, unix.EPERM},
		{"error with a positive errno", auditSet, nlmsg(unix.NLMSG_ERROR, errPayload(5)), false, false, errors.New("malformed")},
		{"length past the datagram", auditGet, func() []byte { b := nlmsg(auditGet, status); binary.NativeEndian.PutUint32(b, 4096); return b }(), false, false, errors.New("malformed")},
		{"length below the header", auditGet, func() []byte { b := nlmsg(auditGet, status); binary.NativeEndian.PutUint32(b, 3); return b }(), false, false, errors.New("malformed")},
		{"short status", auditGet, nlmsg(auditGet, []byte{1, 2, 3}), false, false, errors.New("short")},
		{"other types skipped", auditGet, append(nlmsg(1300, []byte("x")), nlmsg(auditGet, status)...), true, true, nil},
		{"empty", auditGet, nil, false, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, done, err := parseAnswer(tc.typ, tc.b, false)
			switch {
			case tc.err == nil && err != nil, tc.err != nil && err == nil:
				t.Fatalf("err = %v, want %v", err, tc.err)
			case tc.err != nil && !errors.Is(err, tc.err) && !strings.Contains(err.Error(), tc.err.Error()):
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if (st != nil) != tc.wantStatus || done != tc.done {
				t.Fatalf("status %v done %v, want status %v done %v", st, done, tc.wantStatus, tc.done)
			}
			if st != nil {
				if s, err := ParseStatus(st); err != nil || s.Lost != 7 {
					t.Fatalf("status %+v, %v", s, err)
				}
			}
		})
	}
}

const netlinkHeader = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n"

func TestParseNetlinkTable(t *testing.T) {
	table := netlinkHeader +
		"0000000049136840 0   0          00000000 0        0        0     2        0        4       \n" +
		"000000002188cc23 9   0          00000000 0        0        0     2        0        6       \n" +
		"00000000aaaaaaaa 9   4321       00000001 0        0        0     2        17       99001   \n" +
		"00000000bbbbbbbb 9   -4001      00000001 0        0        0     2        0        99002   \n" +
		"00000000cccccccc 16  77         00000001 0        0        0     2        0        99003   \n"
	got, err := ParseNetlinkTable([]byte(table))
	if err == nil {
		t.Fatalf("a negative port id parsed: %+v", got)
	}
	table = strings.Replace(table, "-4001", "4001 ", 1)
	got, err = ParseNetlinkTable([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []Reader{{PortID: 4321, Inode: 99001, Drops: 17}, {PortID: 4001, Inode: 99002}}
	if !slices.Equal(got, want) {
		t.Errorf("readers %+v, want %+v", got, want)
	}
	for name, bad := range map[string]string{
		"empty":        "",
		"other header": "a b c\n",
		"short line":   netlinkHeader + "00 9 1 1\n",
		"bad groups":   netlinkHeader + "00000000aaaaaaaa 9   4321       zz 0 0 0 2 0 1\n",
	} {
		if r, err := ParseNetlinkTable([]byte(bad)); err == nil {
			t.Errorf("%s: parsed %+v", name, r)
		}
	}
}

func FuzzParseAnswer(f *testing.F) {
	status := statusBytes(44, map[int]uint32{statusLost: 7})
	f.Add(uint16(auditGet), append(nlmsg(unix.NLMSG_ERROR, errPayload(0)), nlmsg(auditGet, status)...))
	f.Add(uint16(auditSet), nlmsg(unix.NLMSG_ERROR, errPayload(-1)))
	f.Add(uint16(auditGet), nlmsg(auditGet, status[:20]))
	f.Fuzz(func(t *testing.T, typ uint16, b []byte) {
		st, done, err := parseAnswer(typ, b, false)
		if err != nil && (st != nil || done) {
			t.Fatalf("an error with a result: %v %v %v", st, done, err)
		}
		if st != nil {
			if len(st) < 8 || len(st) > len(b) {
				t.Fatalf("status of %d bytes from %d", len(st), len(b))
			}
			if s, err := ParseStatus(st); err == nil && len(st) < statusMinLen {
				t.Fatalf("short status parsed: %+v", s)
			}
		}
	})
}

func FuzzParseNetlinkTable(f *testing.F) {
	f.Add([]byte(netlinkHeader + "00000000aaaaaaaa 9   4321       00000001 0        0        0     2        17       99001   \n"))
	f.Add([]byte(netlinkHeader))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseNetlinkTable(b)
		if err != nil {
			return
		}
		if len(rs) > strings.Count(string(b), "\n")+1 {
			t.Fatalf("%d readers from %d lines", len(rs), strings.Count(string(b), "\n")+1)
		}
	})
}

// TestStatusFromTheKernel reads the real kernel's audit status, sets its
// backlog_limit and rate_limit and puts them back, and finds the daemon's own multicast
// socket among the readers.
func TestStatusFromTheKernel(t *testing.T) {
	testenv.RequireRoot(t)
	// It sets the host's backlog_limit: a daemon of another package
	// raising it meanwhile would fail the check below (and see the change).
	testenv.AuditDisturber(t)
	st, err := GetStatus()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel audit status: %+v", st)
	if st.BacklogLimit != 0 {
		// 0 is "no limit": setting it would change what the host does.
		if err := SetBacklogLimit(st.BacklogLimit + 1); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := SetBacklogLimit(st.BacklogLimit); err != nil {
				t.Errorf("restore backlog_limit %d: %v", st.BacklogLimit, err)
			}
		})
		got, err := GetStatus()
		if err != nil || got.BacklogLimit != st.BacklogLimit+1 {
			t.Fatalf("after setting backlog_limit %d: %+v, %v", st.BacklogLimit+1, got, err)
		}
	}
	// rate_limit (set by the audit-loss test for its flood): a limit far
	// above anything this host makes, then put back.
	if err := SetRateLimit(st.RateLimit + 100000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := SetRateLimit(st.RateLimit); err != nil {
			t.Errorf("restore rate_limit %d: %v", st.RateLimit, err)
		}
	})
	if got, err := GetStatus(); err != nil || got.RateLimit != st.RateLimit+100000 {
		t.Fatalf("after setting rate_limit %d: %+v, %v", st.RateLimit+100000, got, err)
	}
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ino, err := s.Inode()
	if err != nil {
		t.Fatal(err)
	}
	readers, err := MulticastReaders()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(readers, func(r Reader) bool { return r.Inode == ino }) {
		t.Errorf("the stream's socket (inode %d) is not among the multicast readers %+v", ino, readers)
	}
}

// TestStatusUnderSignals: Go's runtime preempts its threads with SIGURG, and
// a socket read with a timeout (SO_RCVTIMEO) is not restarted after a signal
// even with SA_RESTART (signal(7)): the read returns EINTR. A status read cut
// short that way is retried, not an error (a daemon saw "read audit answer:
// interrupted system call", and one at start would take the audit stream
// for unavailable).
func TestStatusUnderSignals(t *testing.T) {
	testenv.RequireRoot(t)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_ = unix.Kill(unix.Getpid(), unix.SIGURG)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 2000 {
		if _, err := GetStatus(); err != nil {
			t.Fatalf("status read %d under signals: %v", i, err)
		}
	}
}
