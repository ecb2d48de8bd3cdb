package seccomp

// Native is the syscall ABI of this build.
var Native = AArch64
