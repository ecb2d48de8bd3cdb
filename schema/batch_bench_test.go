package schema

import (
	"fmt"
	"testing"
	"time"
)

// benchBatch is a full batch of the two commonest kinds, as the collector
// receives them from NATS.
func benchBatch(b *testing.B) []byte {
	b.Helper()
	o := Origin{Host: "host-1", BootID: "0b5c6a8e-1d2f-4c3b-9a7e-5f6d7c8b9a0e"}
	events := make([]Event, 0, 1000)
	for i := range 1000 {
		var e Event
		if i%2 == 0 {
			e = o.NewEvent(KindFileOp, NewID(), "scope-1", "sha256:"+fmt.Sprintf("%064x", i), timeAt(i))
			e.FileOp = &FileOp{Syscall: "openat", FlagsClass: "read", PathHash: PathHash(fmt.Sprintf("%064x", i)), PathClass: PathWorkspace, Verdict: "allowed", PID: 1000 + i, Comm: "node"}
		} else {
			e = o.NewEvent(KindDecision, NewID(), "scope-1", "sha256:"+fmt.Sprintf("%064x", i), timeAt(i))
			e.Decision = &Decision{OpID: NewID(), Method: "tools/call", ProtocolEra: "legacy", ProtocolVersion: "2025-06-18", ServerOrigin: "secure-filesystem-server", Tool: "read_text_file", ActionClass: "read", Decision: "allow", Approval: "not_required", LatencyMS: 1.5, PathHashes: []PathHash{PathHash(fmt.Sprintf("%064x", i))}, StartNS: int64(i), EndNS: int64(i + 10)}
		}
		events = append(events, e)
	}
	body, err := EncodeBatch(events)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkDecodeBatch(b *testing.B) {
	body := benchBatch(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		events, rejected, err := DecodeBatch(body)
		if err != nil || rejected != 0 || len(events) != 1000 {
			b.Fatalf("decode: %d events, %d rejected, %v", len(events), rejected, err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
}

func timeAt(i int) time.Time { return time.Unix(1796000000, int64(i)*1000) }
