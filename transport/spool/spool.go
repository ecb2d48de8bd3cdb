// Package spool is the publisher's bounded, durable, ordered on-disk queue of
// NATS messages that could not be published. Records are appended to
// segment files with a length and CRC-32C each and fsynced before Append
// returns; they are read back in the order they were appended and removed
// only after the caller commits them (after JetStream acknowledged them).
//
// Crash behaviour: a torn record at the tail of the last segment (a write
// cut by a crash before Append returned) is truncated on Open; a head
// position lost in a crash makes the head segment replay again, which the
// stream's message-id dedupe and the store's event-id dedupe absorb.
package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/mcpwarden/mcpwarden/internal/privdir"
)

// ErrFull is returned by Append when the spool holds its maximum.
var ErrFull = errors.New("audit spool is full")

// Record is one NATS message waiting to be published.
type Record struct {
	Subject string
	MsgID   string
	Data    []byte
}

const (
	segmentSuffix  = ".seg"
	headFile       = "head"
	segmentMaxSize = 4 << 20
	recordHeader   = 8 // u32 payload length, u32 CRC-32C of the payload
	maxRecordSize  = 64 << 20
)

// castagnoli is built on first use: every `mcpwarden run` links this
// package, and only runs that spool pay for the table.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// Spool is safe for concurrent use.
type Spool struct {
	dir      string
	maxBytes int64

	mu      sync.Mutex
	segs    []int64 // sequence numbers of segment files, oldest first
	sizes   map[int64]int64
	tail    *os.File // open for append: the last segment
	lock    *os.File // flock held while open
	headSeg int64
	headOff int64
	records int64 // records between head and tail (exact after Open)
}

// Open opens (creating 0700) the spool in dir, bounded to maxBytes.
func Open(dir string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, errors.New("spool: maximum size must be positive")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool directory: %w", err)
	}
	// Whatever the segments hold is published in this host's name: a
	// directory someone else could have filled is refused.
	if err := privdir.Check(dir, "spool directory"); err != nil {
		return nil, err
	}
	s := &Spool{dir: dir, maxBytes: maxBytes, sizes: map[int64]int64{}}
	// One process per spool: two appenders would interleave records.
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open spool lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool %s is in use by another process (%w): give each publisher its own spool directory", dir, err)
	}
	s.lock = lock
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read spool directory: %w", err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), segmentSuffix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, seq)
	}
	slices.Sort(s.segs)
	if b, err := os.ReadFile(filepath.Join(dir, headFile)); err == nil {
		var seg, off int64
		if _, err := fmt.Sscanf(string(b), "%d %d", &seg, &off); err == nil {
			s.headSeg, s.headOff = seg, off
		}
	}
	// Drop segments the head has passed; validate every remaining one and
	// cut a torn tail.
	for len(s.segs) > 0 && s.segs[0] < s.headSeg {
		_ = os.Remove(s.segPath(s.segs[0]))
		s.segs = s.segs[1:]
	}
	if len(s.segs) == 0 || s.segs[0] != s.headSeg {
		s.headOff = 0
		if len(s.segs) > 0 {
			s.headSeg = s.segs[0]
		}
	}
	for _, seq := range s.segs {
		n, good, err := scan(s.segPath(seq))
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(s.segPath(seq)); err == nil && fi.Size() != good {
			if err := os.Truncate(s.segPath(seq), good); err != nil {
				return nil, fmt.Errorf("truncate torn spool segment: %w", err)
			}
		}
		s.sizes[seq] = good
		s.records += n
	}
	if len(s.segs) > 0 && s.headOff > 0 {
		// Records before the head offset were already committed.
		skipped, err := countUntil(s.segPath(s.headSeg), s.headOff)
		if err != nil {
			return nil, err
		}
		s.records -= skipped
	}
	return s, nil
}

func (s *Spool) segPath(seq int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%016d%s", seq, segmentSuffix))
}

// scan counts the valid records of a segment and the offset where they end.
func scan(path string) (n int64, good int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open spool segment: %w", err)
	}
	defer f.Close()
	r := &reader{f: f}
	for {
		if _, err := r.next(); err != nil {
			return n, r.off, nil //nolint:nilerr // a bad record ends the valid part
		}
		n++
	}
}

func countUntil(path string, off int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open spool segment: %w", err)
	}
	defer f.Close()
	r := &reader{f: f}
	var n int64
	for r.off < off {
		if _, err := r.next(); err != nil {
			break
		}
		n++
	}
	return n, nil
}

type reader struct {
	f   *os.File
	off int64
	hdr [recordHeader]byte
}

func (r *reader) next() (Record, error) {
	if _, err := r.f.ReadAt(r.hdr[:], r.off); err != nil {
		return Record{}, err
	}
	n := binary.LittleEndian.Uint32(r.hdr[0:4])
	sum := binary.LittleEndian.Uint32(r.hdr[4:8])
	if n > maxRecordSize {
		return Record{}, errors.New("spool record too large")
	}
	payload := make([]byte, n)
	if _, err := r.f.ReadAt(payload, r.off+recordHeader); err != nil {
		return Record{}, io.ErrUnexpectedEOF
	}
	if crc32.Checksum(payload, castagnoli()) != sum {
		return Record{}, errors.New("spool record checksum mismatch")
	}
	rec, err := decodeRecord(payload)
	if err != nil {
		return Record{}, err
	}
	r.off += recordHeader + int64(n)
	return rec, nil
}

func encodeRecord(buf []byte, rec Record) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, recordHeader)...)
	buf = binary.AppendUvarint(buf, uint64(len(rec.Subject)))
	buf = append(buf, rec.Subject...)
	buf = binary.AppendUvarint(buf, uint64(len(rec.MsgID)))
	buf = append(buf, rec.MsgID...)
	buf = append(buf, rec.Data...)
	payload := buf[start+recordHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(payload, castagnoli()))
	return buf
}

func decodeRecord(p []byte) (Record, error) {
	var rec Record
	for _, dst := range []*string{&rec.Subject, &rec.MsgID} {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return Record{}, errors.New("malformed spool record")
		}
		*dst = string(p[n : n+int(l)])
		p = p[n+int(l):]
	}
	rec.Data = p
	return rec, nil
}

// Bytes is the spool's size on disk not yet committed.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytesLocked()
}

func (s *Spool) bytesLocked() int64 {
	var total int64
	for _, seq := range s.segs {
		total += s.sizes[seq]
	}
	return total - s.headOff
}

// Len is the number of records not yet committed.
func (s *Spool) Len() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records
}

// Append writes recs durably (fsync) at the tail. Unless force is set it
// refuses, with ErrFull and nothing written, when the spool would exceed its
// maximum. force is for messages a caller was already told are recorded:
// they must not be dropped, so they may overshoot the bound.
func (s *Spool) Append(recs []Record, force bool) error {
	var buf []byte
	for _, r := range recs {
		buf = encodeRecord(buf, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && s.bytesLocked()+int64(len(buf)) > s.maxBytes {
		return fmt.Errorf("%w: %d of %d bytes used", ErrFull, s.bytesLocked(), s.maxBytes)
	}
	if s.tail == nil || s.sizes[s.segs[len(s.segs)-1]] >= segmentMaxSize {
		if err := s.rotateLocked(); err != nil {
			return err
		}
	}
	seq := s.segs[len(s.segs)-1]
	if _, err := s.tail.Write(buf); err != nil {
		// Cut what may have been written, so the segment stays valid.
		_ = s.tail.Truncate(s.sizes[seq])
		return fmt.Errorf("write audit spool: %w", err)
	}
	if err := s.tail.Sync(); err != nil {
		return fmt.Errorf("sync audit spool: %w", err)
	}
	s.sizes[seq] += int64(len(buf))
	s.records += int64(len(recs))
	return nil
}

func (s *Spool) rotateLocked() error {
	if s.tail != nil {
		if err := s.tail.Close(); err != nil {
			return fmt.Errorf("close spool segment: %w", err)
		}
		s.tail = nil
	}
	var seq int64
	if len(s.segs) > 0 {
		seq = s.segs[len(s.segs)-1]
		if s.sizes[seq] >= segmentMaxSize {
			seq++
		}
	} else if s.headSeg > 0 {
		seq = s.headSeg
	}
	f, err := os.OpenFile(s.segPath(seq), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open spool segment: %w", err)
	}
	if len(s.segs) == 0 || s.segs[len(s.segs)-1] != seq {
		s.segs = append(s.segs, seq)
		if len(s.segs) == 1 {
			s.headSeg, s.headOff = seq, 0
		}
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return err
		}
	}
	s.tail = f
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open spool directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool directory: %w", err)
	}
	return nil
}

// Cursor marks a position after records returned by Peek.
type Cursor struct {
	seg, off int64
	n        int64
}

// Peek returns up to max records from the head, oldest first, and the
// cursor to Commit once they are safely published.
func (s *Spool) Peek(max int) ([]Record, Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Cursor{seg: s.headSeg, off: s.headOff}
	var out []Record
	for i := 0; i < len(s.segs) && len(out) < max; i++ {
		seq := s.segs[i]
		if seq < c.seg {
			continue
		}
		if seq > c.seg {
			c.seg, c.off = seq, 0
		}
		f, err := os.Open(s.segPath(seq))
		if err != nil {
			return nil, c, fmt.Errorf("open spool segment: %w", err)
		}
		r := &reader{f: f, off: c.off}
		for len(out) < max && r.off < s.sizes[seq] {
			rec, err := r.next()
			if err != nil {
				f.Close()
				return nil, c, fmt.Errorf("read spool segment %d at %d: %w", seq, r.off, err)
			}
			out = append(out, rec)
			c.n++
		}
		c.off = r.off
		f.Close()
	}
	return out, c, nil
}

// Commit drops every record up to c and deletes segments it has passed.
func (s *Spool) Commit(c Cursor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.segs) > 0 && s.segs[0] < c.seg {
		seq := s.segs[0]
		if err := os.Remove(s.segPath(seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove spool segment: %w", err)
		}
		delete(s.sizes, seq)
		s.segs = s.segs[1:]
	}
	s.headSeg, s.headOff = c.seg, c.off
	s.records -= c.n
	// A fully consumed last segment is removed too, so an empty spool takes
	// no space; the next Append starts a fresh segment.
	if len(s.segs) == 1 && s.segs[0] == c.seg && c.off >= s.sizes[c.seg] {
		if s.tail != nil {
			s.tail.Close()
			s.tail = nil
		}
		if err := os.Remove(s.segPath(c.seg)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove spool segment: %w", err)
		}
		delete(s.sizes, c.seg)
		s.segs = nil
		s.headSeg, s.headOff = c.seg+1, 0
	}
	tmp := filepath.Join(s.dir, headFile+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", s.headSeg, s.headOff)), 0o600); err != nil {
		return fmt.Errorf("write spool head: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, headFile)); err != nil {
		return fmt.Errorf("write spool head: %w", err)
	}
	return nil
}

// Close closes the tail segment and releases the spool for another process.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.tail != nil {
		err = s.tail.Close()
		s.tail = nil
	}
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	return err
}
