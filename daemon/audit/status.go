package audit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Offsets in struct audit_status (include/uapi/linux/audit.h): eleven u32
// fields; kernels before 3.12 send only the first eight (no
// backlog_wait_time), before 5.16 ten.
const (
	statusMask         = 0
	statusEnabled      = 4
	statusFailure      = 8
	statusPID          = 12
	statusRateLimit    = 16
	statusBacklogLimit = 20
	statusLost         = 24
	statusBacklog      = 28
	statusMinLen       = 32 // up to and with backlog

	auditStatusRateLimit    = 0x0008 // AUDIT_STATUS_RATE_LIMIT
	auditStatusBacklogLimit = 0x0010 // AUDIT_STATUS_BACKLOG_LIMIT
)

// Status is the kernel's audit status (AUDIT_GET, what `auditctl -s`
// prints).
type Status struct {
	Enabled uint32
	// Failure is what the kernel does when it loses a record: 0 nothing,
	// 1 a kernel message, 2 panic (`auditctl -f`).
	Failure uint32
	// PID is the process registered as the audit daemon (auditd): the
	// kernel sends it every record over unicast and waits for it when its
	// socket is full. 0 when none is registered.
	PID          uint32
	RateLimit    uint32
	BacklogLimit uint32 // records the kernel queues for kauditd; 0 = no limit
	// Lost counts the records the kernel dropped since boot (or since an
	// `auditctl --reset-lost`): backlog overflow, rate limit, memory. It is
	// the kernel's own, shared by every reader: a record lost there reaches
	// no one.
	Lost    uint32
	Backlog uint32 // records queued right now
}

// ParseStatus decodes the payload of an AUDIT_GET answer. A payload shorter
// than the fields up to backlog is an error; longer ones (newer kernels
// add fields) are fine.
func ParseStatus(b []byte) (Status, error) {
	if len(b) < statusMinLen {
		return Status{}, fmt.Errorf("audit status: %d bytes, want at least %d", len(b), statusMinLen)
	}
	u := func(off int) uint32 { return binary.NativeEndian.Uint32(b[off : off+4]) }
	return Status{
		Enabled:      u(statusEnabled),
		Failure:      u(statusFailure),
		PID:          u(statusPID),
		RateLimit:    u(statusRateLimit),
		BacklogLimit: u(statusBacklogLimit),
		Lost:         u(statusLost),
		Backlog:      u(statusBacklog),
	}, nil
}

// GetStatus asks the kernel for its audit status (AUDIT_GET). It needs
// CAP_AUDIT_CONTROL.
func GetStatus() (Status, error) {
	b, err := request(auditGet, nil)
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(b)
}

// SetBacklogLimit sets the kernel's audit backlog_limit (like `auditctl -b
// N`). It needs CAP_AUDIT_CONTROL.
func SetBacklogLimit(n uint32) error {
	body := make([]byte, statusLen)
	binary.NativeEndian.PutUint32(body[statusMask:], auditStatusBacklogLimit)
	binary.NativeEndian.PutUint32(body[statusBacklogLimit:], n)
	_, err := request(auditSet, body)
	return err
}

// SetRateLimit sets the kernel's audit rate_limit, in records per second
// (like `auditctl -r N`; 0 is no limit). Records past it are lost and
// counted in Lost. It needs CAP_AUDIT_CONTROL. The daemon never sets it;
// tests do, to make the kernel lose records on a machine fast enough to
// drain any flood.
func SetRateLimit(n uint32) error {
	body := make([]byte, statusLen)
	binary.NativeEndian.PutUint32(body[statusMask:], auditStatusRateLimit)
	binary.NativeEndian.PutUint32(body[statusRateLimit:], n)
	_, err := request(auditSet, body)
	return err
}

// Reader is a netlink audit socket subscribed to the audit log's multicast
// group (a reader of every record, like this daemon), from
// /proc/net/netlink.
type Reader struct {
	PortID uint32 // netlink port id (usually the pid of the process that opened it first)
	Inode  uint64 // the socket's inode: socket:[Inode] in its owner's /proc/PID/fd
	Drops  uint64 // records this socket lost because its buffer was full
}

// MulticastReaders lists the sockets subscribed to the audit log's
// multicast group in the daemon's network namespace (the kernel sends the
// audit log to the initial one's).
func MulticastReaders() ([]Reader, error) {
	b, err := os.ReadFile("/proc/self/net/netlink")
	if err != nil {
		return nil, fmt.Errorf("list netlink sockets: %w", err)
	}
	return ParseNetlinkTable(b)
}

// ParseNetlinkTable reads /proc/net/netlink and returns the NETLINK_AUDIT
// sockets in the readlog multicast group. Lines that do not parse are an
// error: the table is the kernel's, a surprise there is worth saying.
func ParseNetlinkTable(b []byte) ([]Reader, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 4096), 4096)
	var out []Reader
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first {
			first = false
			if len(f) < 10 || f[0] != "sk" || f[1] != "Eth" || f[2] != "Pid" || f[3] != "Groups" || f[8] != "Drops" || f[9] != "Inode" {
				return nil, errors.New("netlink table: unexpected header")
			}
			continue
		}
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("netlink table: %d fields in a line, want 10", len(f))
		}
		proto, err1 := strconv.ParseUint(f[1], 10, 32)
		port, err2 := strconv.ParseUint(f[2], 10, 32)
		groups, err3 := strconv.ParseUint(f[3], 16, 32)
		drops, err4 := strconv.ParseUint(f[8], 10, 64)
		inode, err5 := strconv.ParseUint(f[9], 10, 64)
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
			return nil, fmt.Errorf("netlink table: %w", err)
		}
		if proto != unix.NETLINK_AUDIT || groups&(1<<(auditNlgrpReadlog-1)) == 0 {
			continue
		}
		out = append(out, Reader{PortID: uint32(port), Inode: inode, Drops: drops})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("netlink table: %w", err)
	}
	if first {
		return nil, errors.New("netlink table: empty")
	}
	return out, nil
}

// Inode is the inode of the stream's socket, to tell it from the other
// readers in MulticastReaders.
func (s *Stream) Inode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
