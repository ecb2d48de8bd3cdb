package sandbox

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPassBufferedGo: the launcher sends its go-ahead without waiting for
// the helper's "ready", so the byte may arrive with the end of the spec
// and sit in the Go init's buffer, where the C init (which reads the spec
// pipe) would never see it and would take the run as refused. The init
// puts it back on the descriptor, alone; a pipe with nothing buffered is
// left to the C init; anything else after the spec refuses the run. It
// fails on the code before (the byte was lost).
func TestPassBufferedGo(t *testing.T) {
	const spec = `{"exe":"/bin/true","argv":["true"]}` + "\n"
	cases := []struct {
		name    string
		stream  string // what the launcher wrote on the spec pipe
		refused bool
		want    string // what the C init then reads on the descriptor ("" : it is untouched)
	}{
		{"the go-ahead came with the spec", spec + string(GoByte), false, string(GoByte)},
		{"the spec alone", spec, false, ""},
		{"another byte", spec + "y", true, ""},
		{"the go-ahead twice", spec + string(GoByte) + string(GoByte), true, ""},
		{"the go-ahead and more", spec + string(GoByte) + spec, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := bufio.NewReader(strings.NewReader(c.stream))
			if _, err := readSpec(in); err != nil {
				t.Fatal(err)
			}
			// The descriptor the C init would read: a pipe the test holds
			// open, so that "untouched" reads as nothing, not as EOF.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			defer r.Close()
			fd := int(r.Fd())
			st := passBufferedGo(in, fd)
			if (st != nil) != c.refused {
				t.Fatalf("refused: %v, want %v", st, c.refused)
			}
			if st != nil && st.Stage != StageSpec {
				t.Errorf("refused at stage %q, want %q", st.Stage, StageSpec)
			}
			if err := unix.SetNonblock(fd, true); err != nil {
				t.Fatal(err)
			}
			var got []byte
			b := make([]byte, 16)
			for {
				n, rerr := unix.Read(fd, b)
				if n <= 0 {
					err = rerr
					break
				}
				got = append(got, b[:n]...)
			}
			if c.want == "" {
				if len(got) != 0 || err != unix.EAGAIN {
					t.Errorf("the descriptor holds %q (%v), want it untouched", got, err)
				}
				return
			}
			if string(got) != c.want || err != nil { // 0 bytes, no error: EOF
				t.Errorf("the C init reads %q (%v), want %q then EOF", got, err, c.want)
			}
		})
	}
}
