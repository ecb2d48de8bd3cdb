package main

import (
	"net"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// netOps: network without a grant: TCP without connect()/bind(), datagrams to pathname unix sockets, ...
var netOps = map[string]op{
	// TCP Fast Open: sendto(MSG_FASTOPEN) connects and sends in one call,
	// without connect().
	"tcp_fastopen_sendto": func(r Request) (string, error) {
		fd, sa, err := tcpTo(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Sendto(fd, []byte(r.Data), unix.MSG_FASTOPEN, sa)
	},
	"tcp_fastopen_sendmsg": func(r Request) (string, error) {
		fd, sa, err := tcpTo(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		_, err = unix.SendmsgN(fd, []byte(r.Data), nil, sa, unix.MSG_FASTOPEN)
		return "", err
	},
	"tcp_fastopen_sendmmsg": func(r Request) (string, error) {
		fd, _, err := tcpTo(r.Addr)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", sendmmsgFastOpen(fd, r.Addr, []byte(r.Data))
	},
	// One UDP datagram to Addr (v4 or v6) through sendmmsg on an
	// unconnected socket: the destination is in the message, not in a
	// connect().
	"udp_sendmmsg": func(r Request) (string, error) {
		return "", udpSendmmsg(r.Addr, []byte("x"))
	},
	// TCP_FASTOPEN_CONNECT defers the connect to the first write.
	"tcp_fastopen_connect_opt": func(r Request) (string, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1)
	},
	// listen() on a socket that was never bound autobinds an ephemeral
	// port: a listening socket without bind(). Returns the port.
	"listen_autobind": func(r Request) (string, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		if err := unix.Listen(fd, 4); err != nil {
			unix.Close(fd)
			return "", err
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			unix.Close(fd)
			return "", err
		}
		// Left open on purpose: the test connects to it.
		return strconv.Itoa(sa.(*unix.SockaddrInet4).Port), nil
	},
	// A unix datagram socket from socketpair() can sendto() any pathname
	// socket (a logger's /dev/log, say), although socket(AF_UNIX) is refused.
	"unix_dgram_sendto": func(r Request) (string, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		return "", unix.Sendto(fds[0], []byte(r.Data), 0, &unix.SockaddrUnix{Name: r.Path})
	},
	// The same through a socketpair of the seqpacket kind, whose sends
	// ignore the destination: allowed, but the datagram must not arrive.
	"unix_seqpacket_sendto": func(r Request) (string, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		return "", unix.Sendto(fds[0], []byte(r.Data), 0, &unix.SockaddrUnix{Name: r.Path})
	},
}

// tcpTo makes a TCP socket and the address of r.Addr (IPv4).
func tcpTo(addr string) (int, unix.Sockaddr, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	return fd, sa, nil
}

// sendmmsgFastOpen sends one message with MSG_FASTOPEN through sendmmsg,
// which x/sys does not wrap.
func sendmmsgFastOpen(fd int, addr string, data []byte) error {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return err
	}
	var rsa unix.RawSockaddrInet4
	rsa.Family = unix.AF_INET
	rsa.Port = uint16(ta.Port>>8) | uint16(ta.Port&0xff)<<8 // network byte order
	copy(rsa.Addr[:], ta.IP.To4())
	iov := unix.Iovec{Base: &data[0]}
	iov.SetLen(len(data))
	var msg struct {
		hdr unix.Msghdr
		n   uint32
		_   uint32
	}
	msg.hdr.Name = (*byte)(unsafe.Pointer(&rsa))
	msg.hdr.Namelen = unix.SizeofSockaddrInet4
	msg.hdr.Iov = &iov
	msg.hdr.SetIovlen(1)
	_, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 1, unix.MSG_FASTOPEN, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func udpSendmmsg(addr string, data []byte) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	port := uint16(ua.Port>>8) | uint16(ua.Port&0xff)<<8 // network byte order
	var (
		name    unsafe.Pointer
		namelen uint32
		family  = unix.AF_INET6
		rsa4    unix.RawSockaddrInet4
		rsa6    unix.RawSockaddrInet6
	)
	if ip4 := ua.IP.To4(); ip4 != nil && !strings.Contains(addr, "[") {
		family = unix.AF_INET
		rsa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: port}
		copy(rsa4.Addr[:], ip4)
		name, namelen = unsafe.Pointer(&rsa4), unix.SizeofSockaddrInet4
	} else {
		rsa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: port}
		copy(rsa6.Addr[:], ua.IP.To16())
		name, namelen = unsafe.Pointer(&rsa6), unix.SizeofSockaddrInet6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	iov := unix.Iovec{Base: &data[0]}
	iov.SetLen(len(data))
	var msg struct {
		hdr unix.Msghdr
		n   uint32
		_   uint32
	}
	msg.hdr.Name = (*byte)(name)
	msg.hdr.Namelen = namelen
	msg.hdr.Iov = &iov
	msg.hdr.SetIovlen(1)
	_, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 1, 0, 0, 0)
	runtime.KeepAlive(&rsa4)
	runtime.KeepAlive(&rsa6)
	if e != 0 {
		return e
	}
	return nil
}
