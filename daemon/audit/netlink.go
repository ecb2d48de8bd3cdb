package audit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Netlink audit constants (include/uapi/linux/audit.h, netlink.h).
const (
	auditGet          = 1000
	auditSet          = 1001
	auditNlgrpReadlog = 1
	auditStatusEnable = 0x1
	nlmsgHdrLen       = 16
	statusLen         = 11 * 4 // struct audit_status as of 5.x+
)

// State of the audit stream, as reported in health events.
const (
	StateOn          = "on"
	StateOff         = "off"         // kernel auditing is disabled; --enable-audit turns it on
	StateUnavailable = "unavailable" // the netlink socket could not be opened
)

// Stream reads Landlock records from the audit multicast group.
type Stream struct {
	fd      int
	lost    atomic.Uint64 // messages the socket dropped (ENOBUFS)
	badRecs atomic.Uint64
}

// Open joins the audit multicast group. It needs CAP_AUDIT_READ.
func Open() (*Stream, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("open audit netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (auditNlgrpReadlog - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("join audit multicast group (needs CAP_AUDIT_READ): %w", err)
	}
	// A large receive buffer rides out bursts of denials.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &Stream{fd: fd}, nil
}

// Lost is the number of times the socket overflowed (records lost).
func (s *Stream) Lost() uint64 { return s.lost.Load() }

// Malformed is the number of records that did not parse.
func (s *Stream) Malformed() uint64 { return s.badRecs.Load() }

// Close closes the socket.
func (s *Stream) Close() error { return unix.Close(s.fd) }

// Run delivers every Landlock record (LandlockAccess or LandlockDomain) to
// fn until ctx ends.
func (s *Stream) Run(ctx context.Context, fn func(rec any)) error {
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			switch {
			case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				s.lost.Add(1)
				continue
			}
			return fmt.Errorf("read audit netlink: %w", err)
		}
		for msg := buf[:n]; len(msg) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(msg[0:4]))
			typ := binary.NativeEndian.Uint16(msg[4:6])
			if l < nlmsgHdrLen || l > len(msg) {
				s.badRecs.Add(1)
				break
			}
			payload := msg[nlmsgHdrLen:l]
			if typ == TypeLandlockAccess || typ == TypeLandlockDomain {
				if rec, err := Parse(typ, payload); err != nil {
					s.badRecs.Add(1)
				} else if ll, err := rec.Landlock(payload); err != nil {
					s.badRecs.Add(1)
				} else {
					fn(ll)
				}
			}
			next := (l + 3) &^ 3
			if next > len(msg) {
				break
			}
			msg = msg[next:]
		}
	}
	return nil
}

// Enabled asks the kernel whether auditing is on.
func Enabled() (bool, error) {
	st, err := request(auditGet, nil)
	if err != nil {
		return false, err
	}
	return binary.NativeEndian.Uint32(st[4:8]) != 0, nil
}

// Enable turns kernel auditing on (like `auditctl -e 1`). It needs
// CAP_AUDIT_CONTROL.
func Enable() error {
	body := make([]byte, statusLen)
	binary.NativeEndian.PutUint32(body[0:4], auditStatusEnable) // mask
	binary.NativeEndian.PutUint32(body[4:8], 1)                 // enabled
	_, err := request(auditSet, body)
	return err
}

// request sends one unicast audit request and returns the payload of the
// AUDIT_GET answer (for AUDIT_SET, the ack).
func request(typ uint16, body []byte) ([]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("open audit netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("bind audit netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	msg := make([]byte, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:6], typ)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:12], 1)
	copy(msg[nlmsgHdrLen:], body)
	// Go's runtime signals its threads (preemption): a call cut short by
	// one is retried, not taken for an answer.
	err = unix.EINTR
	for errors.Is(err, unix.EINTR) {
		err = unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}
	if err != nil {
		return nil, fmt.Errorf("send audit request %d: %w", typ, err)
	}
	buf := make([]byte, 8192)
	var status []byte
	for range 4 {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		for errors.Is(err, unix.EINTR) {
			n, _, err = unix.Recvfrom(fd, buf, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("read audit answer: %w", err)
		}
		st, done, err := parseAnswer(typ, buf[:n], status != nil)
		if err != nil {
			return nil, err
		}
		if st != nil {
			status = st
		}
		if done {
			return status, nil
		}
	}
	return nil, fmt.Errorf("audit request %d: no answer", typ)
}

// parseAnswer reads one datagram of the kernel's answer to an audit
// request of type typ: the AUDIT_GET payload it holds (a copy), and whether
// the answer is complete (an ack, or the status). haveStatus says a status
// came in an earlier datagram.
func parseAnswer(typ uint16, b []byte, haveStatus bool) (status []byte, done bool, err error) {
	for m := b; len(m) >= nlmsgHdrLen; {
		l := int(binary.NativeEndian.Uint32(m[0:4]))
		t := binary.NativeEndian.Uint16(m[4:6])
		if l < nlmsgHdrLen || l > len(m) {
			return nil, false, errors.New("read audit answer: malformed netlink message")
		}
		switch t {
		case unix.NLMSG_ERROR:
			if l >= nlmsgHdrLen+4 {
				if errno := int32(binary.NativeEndian.Uint32(m[nlmsgHdrLen:])); errno != 0 {
					if errno > 0 || errno < -4095 {
						return nil, false, fmt.Errorf("audit request %d: malformed error %d", typ, errno)
					}
					return nil, false, fmt.Errorf("audit request %d: %w", typ, unix.Errno(-errno))
				}
			}
			if typ == auditSet || haveStatus || status != nil {
				return status, true, nil
			}
		case auditGet:
			status = append([]byte(nil), m[nlmsgHdrLen:l]...)
			if len(status) < 8 {
				return nil, false, errors.New("read audit answer: short audit_status")
			}
			return status, true, nil
		}
		next := (l + 3) &^ 3
		if next > len(m) {
			break
		}
		m = m[next:]
	}
	return status, false, nil
}
