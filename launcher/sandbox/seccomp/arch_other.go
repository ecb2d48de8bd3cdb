//go:build !amd64 && !arm64

package seccomp

// Native is nil where the filter has no syscall table: Build refuses to
// build a filter for it, and the run is refused (fail closed).
var Native *Arch
