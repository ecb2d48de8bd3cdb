package auditlog

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/jsonenc"
)

// appendEvent appends ev as one JSON line, byte for byte what
// json.Encoder (HTML escaping on) writes for it. Decision records, the
// proxy's one record per call, are written by hand: encoding/json's
// reflection cost about 7 µs per record, on the same few cores as the
// calls. So are launch records (start, identified, exit): building
// encoding/json's encoder of Event cost about a quarter of a millisecond
// of CPU in every launch, for the three records it wrote. Every other
// kind, and a decision whose latency is not a finite number
// (encoding/json refuses it), goes through encoding/json.
// TestAppendEventMatchesEncodingJSON and FuzzAppendEvent hold the two
// together; TestAppendEventKnowsEveryField fails when a field is added to
// Event or Decision and not here.
func appendEvent(b []byte, ev *schema.Event) ([]byte, error) {
	if !handEncoded(ev) {
		buf := bytes.NewBuffer(b) // Encode writes nothing when it fails
		if err := json.NewEncoder(buf).Encode(ev); err != nil {
			return b, err
		}
		return buf.Bytes(), nil
	}
	b = append(b, `{"event_id":`...)
	b = jsonenc.AppendString(b, ev.EventID)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(ev.SchemaVersion), 10)
	b = append(b, `,"host":`...)
	b = jsonenc.AppendString(b, ev.Host)
	b = append(b, `,"boot_id":`...)
	b = jsonenc.AppendString(b, ev.BootID)
	b = appendOmitEmpty(b, `,"run_id":`, ev.RunID)
	b = appendOmitEmpty(b, `,"scope_id":`, ev.ScopeID)
	b = appendOmitEmpty(b, `,"scope_hash":`, ev.ScopeHash)
	b = append(b, `,"kind":`...)
	b = jsonenc.AppendString(b, string(ev.Kind))
	b = append(b, `,"time_ns":`...)
	b = strconv.AppendInt(b, ev.TimeNS, 10)
	if l := ev.Launch; l != nil {
		b = appendLaunch(b, l)
	}
	if d := ev.Decision; d != nil {
		b = append(b, `,"decision":{"op_id":`...)
		b = jsonenc.AppendString(b, d.OpID)
		b = append(b, `,"method":`...)
		b = jsonenc.AppendString(b, d.Method)
		b = append(b, `,"protocol_era":`...)
		b = jsonenc.AppendString(b, d.ProtocolEra)
		b = append(b, `,"protocol_version":`...)
		b = jsonenc.AppendString(b, d.ProtocolVersion)
		b = append(b, `,"server_origin":`...)
		b = jsonenc.AppendString(b, d.ServerOrigin)
		b = appendOmitEmpty(b, `,"tool":`, d.Tool)
		b = append(b, `,"action_class":`...)
		b = jsonenc.AppendString(b, string(d.ActionClass))
		b = append(b, `,"decision":`...)
		b = jsonenc.AppendString(b, string(d.Decision))
		b = append(b, `,"approval":`...)
		b = jsonenc.AppendString(b, string(d.Approval))
		b = appendOmitEmpty(b, `,"error_code":`, d.ErrorCode)
		b = append(b, `,"retry_count":`...)
		b = strconv.AppendInt(b, int64(d.RetryCount), 10)
		b = append(b, `,"latency_ms":`...)
		b = appendFloat(b, d.LatencyMS)
		if len(d.PathHashes) > 0 {
			b = append(b, `,"path_hashes":[`...)
			for i, h := range d.PathHashes {
				if i > 0 {
					b = append(b, ',')
				}
				b = jsonenc.AppendString(b, string(h))
			}
			b = append(b, ']')
		}
		b = appendOmitEmpty(b, `,"correlation_id":`, d.CorrelationID)
		b = append(b, `,"start_ns":`...)
		b = strconv.AppendInt(b, d.StartNS, 10)
		b = append(b, `,"end_ns":`...)
		b = strconv.AppendInt(b, d.EndNS, 10)
		b = append(b, '}')
	}
	return append(b, '}', '\n'), nil
}

// appendLaunch writes a launch record's body, fields in Launch's order.
func appendLaunch(b []byte, l *schema.Launch) []byte {
	b = append(b, `,"launch":{"phase":`...)
	b = jsonenc.AppendString(b, string(l.Phase))
	b = append(b, `,"mode":`...)
	b = jsonenc.AppendString(b, string(l.Mode))
	b = append(b, `,"landlock_abi":`...)
	b = strconv.AppendInt(b, int64(l.LandlockABI), 10)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, l.Degraded)
	b = appendOmitEmpty(b, `,"degraded_reason":`, l.DegradedReason)
	b = appendOmitEmpty(b, `,"server_exe":`, l.ServerExe)
	b = appendOmitEmpty(b, `,"server_name":`, l.ServerName)
	b = appendOmitEmpty(b, `,"server_version":`, l.ServerVersion)
	b = appendOmitEmpty(b, `,"protocol_era":`, l.ProtocolEra)
	if l.RootPID != 0 {
		b = append(b, `,"root_pid":`...)
		b = strconv.AppendInt(b, int64(l.RootPID), 10)
	}
	b = append(b, `,"exit_status":`...)
	b = strconv.AppendInt(b, int64(l.ExitStatus), 10)
	b = appendOmitEmpty(b, `,"exit_reason":`, string(l.ExitReason))
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, l.DurationMS, 10)
	if len(l.Layers) > 0 {
		b = append(b, `,"layers":[`...)
		for i, ly := range l.Layers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = jsonenc.AppendString(b, string(ly.Name))
			b = append(b, `,"state":`...)
			b = jsonenc.AppendString(b, string(ly.State))
			b = appendOmitEmpty(b, `,"reason":`, ly.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"server_uid":`...)
	b = strconv.AppendInt(b, int64(l.ServerUID), 10)
	b = appendOmitEmpty(b, `,"file_owner":`, l.FileOwner)
	if l.LauncherUID != nil {
		b = append(b, `,"launcher_uid":`...)
		b = strconv.AppendInt(b, int64(*l.LauncherUID), 10)
	}
	b = appendOmitEmpty(b, `,"launcher_uid_by":`, string(l.LauncherUIDBy))
	return append(b, '}')
}

// handEncoded says whether appendEvent writes ev itself: no body but a
// launch and a decision, and a latency encoding/json can write.
func handEncoded(ev *schema.Event) bool {
	if ev.FileOp != nil || ev.LandlockDenial != nil || ev.Finding != nil || ev.Health != nil {
		return false
	}
	if d := ev.Decision; d != nil && (math.IsNaN(d.LatencyMS) || math.IsInf(d.LatencyMS, 0)) {
		return false
	}
	return true
}

func appendOmitEmpty(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return jsonenc.AppendString(append(b, key...), v)
}

// appendFloat writes a finite float64 as encoding/json does: the shortest
// decimal that reads back the same, in exponent form below 1e-6 and from
// 1e21 on, with a one-digit negative exponent written without its zero
// (1e-07 is written 1e-7).
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}
