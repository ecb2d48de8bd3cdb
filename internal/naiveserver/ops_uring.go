package main

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// uringOps: what a server granted io_uring ("allow_io_uring": true) can
// ask of the kernel without the syscall the filter would check.
var uringOps = map[string]op{
	// A vsock stream socket made with IORING_OP_SOCKET (the filter refuses
	// socket(AF_VSOCK)) connected with IORING_OP_CONNECT to context N
	// (2: the hypervisor's host), port Flags.
	"uring_vsock_connect": func(r Request) (string, error) {
		s, err := uringSocket(unix.AF_VSOCK)
		if err != nil {
			return "", err
		}
		defer unix.Close(s)
		var sa [16]byte // struct sockaddr_vm
		binary.LittleEndian.PutUint16(sa[0:], unix.AF_VSOCK)
		binary.LittleEndian.PutUint32(sa[4:], uint32(r.Flags))
		binary.LittleEndian.PutUint32(sa[8:], uint32(r.N))
		if err := uringConnect(s, sa[:]); err != nil {
			return "", err
		}
		return "connected", nil
	},
	// A pathname unix socket at Path reached with io_uring alone; Data is
	// sent, the answer is what comes back.
	"uring_unix_connect": func(r Request) (string, error) { return uringUnixConnect(r.Path, r.Data) },
	// A TCP connect to Addr (IPv4, "a.b.c.d:port") as an IORING_OP_CONNECT
	// of a socket made with socket(): the answer is the completion's result.
	"uring_connect": func(r Request) (string, error) {
		s, sa, err := tcp4Socket(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(s)
		if err := uringConnect(s, sa[:]); err != nil {
			return "", err
		}
		return "", nil
	},
	// Data sent to Addr (IPv4, "a.b.c.d:port") by an IORING_OP_SENDMSG
	// with MSG_FASTOPEN on a TCP socket made with socket() and never
	// connected: TCP Fast Open connects inside sendmsg, without connect()
	// (the filter refuses MSG_FASTOPEN on the syscalls, not in a ring).
	"uring_fastopen": func(r Request) (string, error) {
		s, sa, err := tcp4Socket(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(s)
		data := []byte(r.Data)
		iov := unix.Iovec{Base: &data[0]}
		iov.SetLen(len(data))
		msg := unix.Msghdr{Name: &sa[0], Namelen: uint32(len(sa)), Iov: &iov, Iovlen: 1}
		res, err := uringOne(func(sqe []byte) {
			sqe[0] = 9 // IORING_OP_SENDMSG
			binary.LittleEndian.PutUint32(sqe[4:], uint32(s))
			binary.LittleEndian.PutUint64(sqe[16:], uint64(uintptr(unsafe.Pointer(&msg))))
			binary.LittleEndian.PutUint32(sqe[24:], 1)                 // len: one msghdr
			binary.LittleEndian.PutUint32(sqe[28:], unix.MSG_FASTOPEN) // msg_flags
		})
		runtime.KeepAlive(sa)
		runtime.KeepAlive(data)
		runtime.KeepAlive(&iov)
		runtime.KeepAlive(&msg)
		if err != nil {
			return "", err
		}
		if res == -int32(unix.EINPROGRESS) {
			// Without a Fast Open cookie the SYN went out and the data
			// waits: wait for the connection (or its error) before the
			// socket is closed, so that the peer sees it either way.
			fds := []unix.PollFd{{Fd: int32(s), Events: unix.POLLOUT}}
			if n, err := unix.Poll(fds, 120_000); err != nil || n == 0 {
				return "", unix.ETIMEDOUT
			}
			if e, err := unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
				return "", unix.Errno(e)
			}
			return "connected", nil
		}
		if res < 0 {
			return "", unix.Errno(-res)
		}
		return "sent", nil
	},
	// Data sent to Addr (IPv4, "a.b.c.d:port") by an IORING_OP_SENDMSG on
	// an unconnected UDP socket, the destination in the message: the
	// answer is the completion's result.
	"uring_udp_sendmsg": func(r Request) (string, error) {
		ap, err := netip.ParseAddrPort(r.Addr)
		if err != nil || !ap.Addr().Is4() {
			return "", unix.EINVAL
		}
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(s)
		var sa [16]byte // struct sockaddr_in
		binary.LittleEndian.PutUint16(sa[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(sa[2:], ap.Port())
		a4 := ap.Addr().As4()
		copy(sa[4:8], a4[:])
		data := []byte(r.Data + "x")
		iov := unix.Iovec{Base: &data[0]}
		iov.SetLen(len(data))
		msg := unix.Msghdr{Name: &sa[0], Namelen: uint32(len(sa)), Iov: &iov, Iovlen: 1}
		res, err := uringOne(func(sqe []byte) {
			sqe[0] = 9 // IORING_OP_SENDMSG
			binary.LittleEndian.PutUint32(sqe[4:], uint32(s))
			binary.LittleEndian.PutUint64(sqe[16:], uint64(uintptr(unsafe.Pointer(&msg))))
			binary.LittleEndian.PutUint32(sqe[24:], 1) // len: one msghdr
		})
		runtime.KeepAlive(sa)
		runtime.KeepAlive(data)
		runtime.KeepAlive(&iov)
		runtime.KeepAlive(&msg)
		if err != nil {
			return "", err
		}
		if res < 0 {
			return "", unix.Errno(-res)
		}
		return "sent", nil
	},
}

// tcp4Socket is tcpTo's socket (made with socket(), not connected; the
// caller closes it) with the address of addr (IPv4, "a.b.c.d:port") as a
// struct sockaddr_in: family, port (network order), address.
func tcp4Socket(addr string) (int, [16]byte, error) {
	var sa [16]byte
	s, to, err := tcpTo(addr)
	if err != nil {
		return -1, sa, err
	}
	in := to.(*unix.SockaddrInet4)
	binary.LittleEndian.PutUint16(sa[0:], unix.AF_INET)
	binary.BigEndian.PutUint16(sa[2:], uint16(in.Port))
	copy(sa[4:8], in.Addr[:])
	return s, sa, nil
}

// uringUnixConnect connects to the pathname unix socket at path with
// io_uring alone: IORING_OP_SOCKET makes the socket (the filter refuses
// socket(AF_UNIX)), IORING_OP_CONNECT connects it; then it writes data
// with write(2) and returns what it reads back.
func uringUnixConnect(path, data string) (string, error) {
	s, err := uringSocket(unix.AF_UNIX)
	if err != nil {
		return "", err
	}
	defer unix.Close(s)
	var sa [110]byte // struct sockaddr_un
	binary.LittleEndian.PutUint16(sa[0:], unix.AF_UNIX)
	copy(sa[2:], path)
	if err := uringConnect(s, sa[:min(2+len(path)+1, len(sa))]); err != nil {
		return "", err
	}
	if _, err := unix.Write(s, []byte(data)); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, err := unix.Read(s, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// uringSocket makes a stream socket of domain with IORING_OP_SOCKET (the
// filter refuses socket() for AF_UNIX and AF_VSOCK).
func uringSocket(domain int) (int, error) {
	res, err := uringOne(func(sqe []byte) {
		sqe[0] = 45                                              // IORING_OP_SOCKET
		binary.LittleEndian.PutUint32(sqe[4:], uint32(domain))   // domain
		binary.LittleEndian.PutUint64(sqe[8:], unix.SOCK_STREAM) // type (off); protocol 0 (len)
	})
	if err != nil {
		return 0, err
	}
	if res < 0 {
		return 0, unix.Errno(-res)
	}
	return int(res), nil
}

// uringConnect connects s to the address sa (its bytes are its length)
// with IORING_OP_CONNECT.
func uringConnect(s int, sa []byte) error {
	res, err := uringOne(func(sqe []byte) {
		sqe[0] = 16 // IORING_OP_CONNECT
		binary.LittleEndian.PutUint32(sqe[4:], uint32(s))
		binary.LittleEndian.PutUint64(sqe[8:], uint64(len(sa))) // addr2: the address's length
		binary.LittleEndian.PutUint64(sqe[16:], uint64(uintptr(unsafe.Pointer(&sa[0]))))
	})
	runtime.KeepAlive(sa)
	if err != nil {
		return err
	}
	if res < 0 {
		return unix.Errno(-res)
	}
	return nil
}

// uringOne sets up a ring of one entry, lets fill write the submission
// entry, submits it and waits for its completion: its result.
func uringOne(fill func(sqe []byte)) (int32, error) {
	var p [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p[0])), 0)
	if e != 0 {
		return 0, e
	}
	defer unix.Close(int(fd))
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(p[off:]) }
	sqEntries, cqEntries := u32(0), u32(4)
	sqTail, sqMask, sqArray := u32(44), u32(48), u32(64)
	cqHead, cqTail, cqMask, cqes := u32(80), u32(84), u32(88), u32(100)
	sq, err := unix.Mmap(int(fd), 0, int(sqArray+sqEntries*4), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(sq)
	cq, err := unix.Mmap(int(fd), 0x8000000, int(cqes+cqEntries*16), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(cq)
	sqes, err := unix.Mmap(int(fd), 0x10000000, int(sqEntries*64), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(sqes)
	fill(sqes[:64])
	tail := (*uint32)(unsafe.Pointer(&sq[sqTail]))
	t := *tail
	*(*uint32)(unsafe.Pointer(&sq[sqArray+(t&*(*uint32)(unsafe.Pointer(&sq[sqMask])))*4])) = 0
	*tail = t + 1 // the kernel reads it in io_uring_enter, after this store
	const enterGetEvents = 1
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, fd, 1, 1, enterGetEvents, 0, 0); e != 0 {
		return 0, e
	}
	head := *(*uint32)(unsafe.Pointer(&cq[cqHead]))
	if *(*uint32)(unsafe.Pointer(&cq[cqTail])) == head {
		return 0, unix.EAGAIN
	}
	cqe := cq[cqes+(head&*(*uint32)(unsafe.Pointer(&cq[cqMask])))*16:]
	return int32(binary.LittleEndian.Uint32(cqe[8:])), nil
}
