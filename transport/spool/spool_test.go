package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func recs(from, n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Subject: "mcpwarden.v1.h.file_op", MsgID: fmt.Sprintf("id-%d", from+i), Data: []byte(fmt.Sprintf("payload %d\n", from+i))}
	}
	return out
}

func TestAppendPeekCommitReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(recs(0, 10), false); err != nil {
		t.Fatal(err)
	}
	got, cur, err := s.Peek(4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].MsgID != "id-0" || got[3].MsgID != "id-3" || string(got[2].Data) != "payload 2\n" {
		t.Fatalf("peek: %+v", got)
	}
	if err := s.Commit(cur); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 6 {
		t.Fatalf("len %d, want 6", s.Len())
	}
	s.Close()

	// Reopen: the committed head is remembered.
	s, err = Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 6 {
		t.Fatalf("len after reopen %d, want 6", s.Len())
	}
	got, cur, err = s.Peek(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || got[0].MsgID != "id-4" || got[5].MsgID != "id-9" {
		t.Fatalf("after reopen: %d records, first %s", len(got), got[0].MsgID)
	}
	if err := s.Commit(cur); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("drained spool: len %d bytes %d", s.Len(), s.Bytes())
	}
	// Appending after a drain starts a new segment and keeps order.
	if err := s.Append(recs(10, 2), false); err != nil {
		t.Fatal(err)
	}
	got, _, _ = s.Peek(10)
	if len(got) != 2 || got[0].MsgID != "id-10" {
		t.Fatalf("after drain: %+v", got)
	}
	s.Close()
}

func TestSegmentsRotateInOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for i := 0; i < 10; i++ {
		if err := s.Append([]Record{{Subject: "s", MsgID: fmt.Sprint(i), Data: big}}, false); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) < 2 {
		t.Fatalf("%d segments for 10 MiB", len(segs))
	}
	for i := 0; i < 10; i++ {
		got, cur, err := s.Peek(1)
		if err != nil || len(got) != 1 || got[0].MsgID != fmt.Sprint(i) {
			t.Fatalf("record %d: %v %+v", i, err, got)
		}
		if err := s.Commit(cur); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ = filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 0 {
		t.Fatalf("segments left after draining: %v", segs)
	}
	s.Close()
}

func TestTornTailIsCut(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir, 1<<30)
	if err := s.Append(recs(0, 3), false); err != nil {
		t.Fatal(err)
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	f, _ := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3}) // a record header cut short by a crash
	f.Close()
	s, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 3 {
		t.Fatalf("len %d, want 3", s.Len())
	}
	if err := s.Append(recs(3, 1), false); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Peek(10)
	if err != nil || len(got) != 4 || got[3].MsgID != "id-3" {
		t.Fatalf("after torn tail: %v %d", err, len(got))
	}
	s.Close()
}

func TestFullRefusesUnlessForced(t *testing.T) {
	s, _ := Open(t.TempDir(), 200)
	defer s.Close()
	if err := s.Append(recs(0, 2), false); err != nil {
		t.Fatal(err)
	}
	err := s.Append(recs(2, 10), false)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("got %v, want ErrFull", err)
	}
	if s.Len() != 2 {
		t.Fatalf("a refused append wrote records: len %d", s.Len())
	}
	if err := s.Append(recs(2, 10), true); err != nil {
		t.Fatalf("forced append: %v", err)
	}
	if s.Len() != 12 {
		t.Fatalf("len %d, want 12", s.Len())
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(nil, Record{Subject: "a.b", MsgID: "x", Data: []byte("d")})[recordHeader:])
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, p []byte) {
		rec, err := decodeRecord(p)
		if err != nil {
			return
		}
		again, err := decodeRecord(encodeRecord(nil, rec)[recordHeader:])
		if err != nil || again.Subject != rec.Subject || again.MsgID != rec.MsgID || string(again.Data) != string(rec.Data) {
			t.Fatalf("round trip changed the record")
		}
	})
}

func TestOneProcessPerSpool(t *testing.T) {
	dir := t.TempDir()
	a, err := Open(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 1<<20); err == nil {
		t.Fatal("a second open of a spool in use succeeded")
	}
	a.Close()
	b, err := Open(dir, 1<<20)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	b.Close()
}

// TestPlantedSpoolIsRefused: the spool's records are published in the
// host's name, so a spool directory a local user could have filled before
// the publisher started is refused: a symlink, a directory owned by another
// user, one that group or others may write to.
func TestPlantedSpoolIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir string)
		root  bool // needs root (chown)
	}{
		{"symlink", func(t *testing.T, dir string) {
			real := filepath.Join(filepath.Dir(dir), "elsewhere")
			if err := os.Mkdir(real, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"world writable", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"group writable", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o770); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"owned by another user", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				testenv.Missing(t, "chown to another user needs root")
			}
			dir := filepath.Join(t.TempDir(), "spool")
			tc.plant(t, dir)
			if s, err := Open(dir, 1<<20); err == nil {
				s.Close()
				t.Fatal("a planted spool directory was opened")
			} else if !strings.Contains(err.Error(), dir) {
				t.Errorf("error does not name the directory: %v", err)
			}
		})
	}
	// The directory Open creates itself is accepted, again and again.
	dir := filepath.Join(t.TempDir(), "spool")
	for i := 0; i < 2; i++ {
		s, err := Open(dir, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}
