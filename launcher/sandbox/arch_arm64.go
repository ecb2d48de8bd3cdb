package sandbox

import "golang.org/x/sys/unix"

// NativeArch is the syscall ABI of this build.
var NativeArch = Arch{
	AuditArch:       unix.AUDIT_ARCH_AARCH64,
	IOUringSetup:    unix.SYS_IO_URING_SETUP,
	IOUringEnter:    unix.SYS_IO_URING_ENTER,
	IOUringRegister: unix.SYS_IO_URING_REGISTER,
	Socket:          unix.SYS_SOCKET,
	Ioctl:           unix.SYS_IOCTL,
	PathMetadata:    []uint32{unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2, unix.SYS_FCHOWNAT},
	Keyring:         []uint32{unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL},
	Setsid:          unix.SYS_SETSID,
}
