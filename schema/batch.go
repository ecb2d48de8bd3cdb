package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
)

// Batch wire format: the body of one NATS message is newline-delimited JSON,
// every event of the batch of the same host and kind. The header
// BatchHeader names the format so a consumer can refuse one it does not know.
//
// ndjson-v2 (what publishers send): the first line is the batch envelope,
// {"batch":{"format":"ndjson-v2",...}}, holding the envelope fields every
// event of the message shares (schema version, host, boot, run, scope, scope
// hash, kind); each following line is one Event without those fields. About
// half of an event's bytes are its envelope, so this halves what is encoded,
// sent, stored in JetStream and decoded.
//
// ndjson-v1: one whole Event per line. DecodeBatch still reads it: spools
// written before v2 replay v1 bodies, and tools may send single events.
// DecodeBatch tells the two apart by the body itself (a v2 body starts with
// the envelope line), so a spooled v1 body under a v2 header still decodes.
const (
	BatchHeader      = "Mcpwarden-Batch"
	BatchFormat      = "ndjson-v2"
	BatchFormatV1    = "ndjson-v1"
	MaxBatchBytes    = 4 << 20 // one message body at most
	MaxBatchEvents   = 65536
	maxEventLineSize = 64 << 10
)

// KnownBatchFormat reports whether a consumer can decode header value f.
func KnownBatchFormat(f string) bool { return f == BatchFormat || f == BatchFormatV1 }

// Envelope is what every event of one ndjson-v2 message shares.
type Envelope struct {
	SchemaVersion int    `json:"schema_version"`
	Host          string `json:"host"`
	BootID        string `json:"boot_id"`
	RunID         string `json:"run_id,omitempty"`
	ScopeID       string `json:"scope_id,omitempty"`
	ScopeHash     string `json:"scope_hash,omitempty"`
	Kind          Kind   `json:"kind"`
}

// EnvelopeOf returns e's envelope fields.
func EnvelopeOf(e *Event) Envelope {
	return Envelope{e.SchemaVersion, e.Host, e.BootID, e.RunID, e.ScopeID, e.ScopeHash, e.Kind}
}

type envelopeLine struct {
	Batch struct {
		Format string `json:"format"`
		Envelope
	} `json:"batch"`
}

var envelopePrefix = []byte(`{"batch":`)

// AppendEnvelope starts an ndjson-v2 body: the envelope line.
func AppendEnvelope(buf []byte, env Envelope) ([]byte, error) {
	var l envelopeLine
	l.Batch.Format, l.Batch.Envelope = BatchFormat, env
	buf, err := appendLine(buf, &l)
	if err != nil {
		return buf, fmt.Errorf("encode batch envelope: %w", err)
	}
	return buf, nil
}

// appendLine appends v's JSON and a newline; on error buf is unchanged.
func appendLine(buf []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return buf, err
	}
	buf = append(buf, b...)
	return append(buf, '\n'), nil
}

// eventLine is an Event without its envelope: the shallower, empty,
// omitempty fields hide the embedded Event's own.
type eventLine struct {
	*Event
	SchemaVersion int    `json:"schema_version,omitempty"`
	Host          string `json:"host,omitempty"`
	BootID        string `json:"boot_id,omitempty"`
	RunID         string `json:"run_id,omitempty"`
	ScopeID       string `json:"scope_id,omitempty"`
	ScopeHash     string `json:"scope_hash,omitempty"`
	Kind          Kind   `json:"kind,omitempty"`
}

// AppendEventLine appends e as one ndjson-v2 line: every field but the
// envelope, which must be the message's (EnvelopeOf(e) == env).
func AppendEventLine(buf []byte, e *Event) ([]byte, error) {
	buf, err := appendLine(buf, eventLine{Event: e})
	if err != nil {
		return buf, fmt.Errorf("encode event %s: %w", e.EventID, err)
	}
	return buf, nil
}

// ErrBatchTooLarge is returned for a batch over MaxBatchBytes or MaxBatchEvents.
var ErrBatchTooLarge = errors.New("event batch too large")

// AppendEvent appends e's wire form (one JSON line) to buf.
func AppendEvent(buf []byte, e *Event) ([]byte, error) {
	buf, err := appendLine(buf, e)
	if err != nil {
		return buf, fmt.Errorf("encode event %s: %w", e.EventID, err)
	}
	return buf, nil
}

// EncodeBatch returns the wire form of events.
func EncodeBatch(events []Event) ([]byte, error) {
	var buf []byte
	for i := range events {
		var err error
		if buf, err = AppendEvent(buf, &events[i]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// DecodeBatch parses a batch body (ndjson-v2 or v1) from an untrusted
// publisher. Lines that do not parse or fail Validate are not returned;
// their count is. Blank lines are ignored. A body over the size limits, or
// a v2 body whose envelope line does not parse, is refused as a whole.
func DecodeBatch(body []byte) (events []Event, rejected int, err error) {
	if len(body) > MaxBatchBytes {
		return nil, 0, fmt.Errorf("%w: %d bytes (limit %d)", ErrBatchTooLarge, len(body), MaxBatchBytes)
	}
	n := bytes.Count(body, []byte{'\n'}) + 1
	if n > MaxBatchEvents+1 {
		return nil, 0, fmt.Errorf("%w: %d lines (limit %d)", ErrBatchTooLarge, n, MaxBatchEvents)
	}
	events = make([]Event, 0, n)
	var env *Envelope
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); bytes.HasPrefix(trimmed, envelopePrefix) {
		line, rest, _ := bytes.Cut(trimmed, []byte{'\n'})
		var l envelopeLine
		// Strict: an envelope applies to every line, so nothing in it may
		// be ambiguous or unexpected.
		if err := jsonv2.Unmarshal(line, &l, jsonv2.RejectUnknownMembers(true)); err != nil {
			return nil, 0, fmt.Errorf("batch envelope: %w", err)
		}
		if l.Batch.Format != BatchFormat {
			return nil, 0, fmt.Errorf("batch envelope: format %q, want %q", l.Batch.Format, BatchFormat)
		}
		env, body = &l.Batch.Envelope, rest
	}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) > maxEventLineSize {
			rejected++
			continue
		}
		var e Event
		// json v2 (the upstream of encoding/json/v2): about twice as fast as
		// v1 here, the collector's hottest path, and stricter on untrusted
		// input: duplicate names and invalid UTF-8 are errors, names match
		// exactly, and a member this release does not know (a name in
		// another case included) is an error too, so no reader can take a
		// line to mean something else than this one does.
		if jsonv2.Unmarshal(line, &e, jsonv2.RejectUnknownMembers(true)) != nil || (env != nil && !applyEnvelope(&e, env)) || e.Validate() != nil {
			rejected++
			continue
		}
		events = append(events, e)
	}
	return events, rejected, nil
}

// applyEnvelope fills e's envelope from env. A line that sets an envelope
// field itself is refused: it would mean one thing to a reader that applies
// the envelope first and another to one that applies it last.
func applyEnvelope(e *Event, env *Envelope) bool {
	if EnvelopeOf(e) != (Envelope{}) {
		return false
	}
	e.SchemaVersion, e.Host, e.BootID, e.RunID, e.ScopeID, e.ScopeHash, e.Kind =
		env.SchemaVersion, env.Host, env.BootID, env.RunID, env.ScopeID, env.ScopeHash, env.Kind
	return true
}
