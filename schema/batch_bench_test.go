package schema

import (
	"fmt"
	"testing"
	"time"
)

// benchEvents are a full message's worth of file operations of one run,
// the commonest kind, as the daemon publishes them.
func benchEvents(b *testing.B) []Event {
	b.Helper()
	o := Origin{Host: "host-1", BootID: "0b5c6a8e-1d2f-4c3b-9a7e-5f6d7c8b9a0e"}
	events := make([]Event, 0, 1000)
	for i := range 1000 {
		e := o.NewEvent(KindFileOp, "3f2a9c4e8b7d6a5f1e0c9b8a7d6e5f4a", "scope-1", "sha256:"+fmt.Sprintf("%064x", 7), timeAt(i))
		e.FileOp = &FileOp{Syscall: "openat", FlagsClass: "read", PathHash: PathHash(fmt.Sprintf("%064x", i)), PathClass: PathWorkspace, Verdict: "allowed", PID: 1000 + i, Comm: "node"}
		events = append(events, e)
	}
	return events
}

// benchBody encodes events as ndjson-v2 (v1 when v1 is set).
func benchBody(b *testing.B, events []Event, v1 bool) []byte {
	b.Helper()
	if v1 {
		body, err := EncodeBatch(events)
		if err != nil {
			b.Fatal(err)
		}
		return body
	}
	body, err := AppendEnvelope(nil, EnvelopeOf(&events[0]))
	for i := range events {
		if err != nil {
			break
		}
		body, err = AppendEventLine(body, &events[i])
	}
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func BenchmarkDecodeBatch(b *testing.B) {
	for _, v1 := range []bool{false, true} {
		b.Run(map[bool]string{false: "ndjson-v2", true: "ndjson-v1"}[v1], func(b *testing.B) {
			body := benchBody(b, benchEvents(b), v1)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				events, rejected, err := DecodeBatch(body)
				if err != nil || rejected != 0 || len(events) != 1000 {
					b.Fatalf("decode: %d events, %d rejected, %v", len(events), rejected, err)
				}
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func BenchmarkEncodeBatch(b *testing.B) {
	events := benchEvents(b)
	for _, v1 := range []bool{false, true} {
		b.Run(map[bool]string{false: "ndjson-v2", true: "ndjson-v1"}[v1], func(b *testing.B) {
			b.SetBytes(int64(len(benchBody(b, events, v1))))
			b.ReportAllocs()
			for b.Loop() {
				benchBody(b, events, v1)
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}

func timeAt(i int) time.Time { return time.Unix(1796000000, int64(i)*1000) }
