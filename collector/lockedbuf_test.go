package collector_test

import (
	"bytes"
	"sync"
)

// lockedBuffer is a buffer safe for a child's writes and our reads. It
// wraps rather than embeds bytes.Buffer: an embedded ReadFrom would let
// io.Copy write around the lock.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
