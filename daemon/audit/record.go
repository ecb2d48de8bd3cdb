// Package audit reads the kernel's audit stream over NETLINK_AUDIT (the
// read-only multicast group, so no auditd is needed and an auditd that runs
// is not disturbed) and parses Landlock's own denial records: type 1423
// (AUDIT_LANDLOCK_ACCESS) and 1424 (AUDIT_LANDLOCK_DOMAIN).
package audit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Record types.
const (
	TypeLandlockAccess = 1423
	TypeLandlockDomain = 1424
)

// Record is one parsed audit record.
type Record struct {
	Type   uint16
	Serial uint64 // the audit event serial, shared by the records of one event
	TimeMS int64  // the record's timestamp, Unix ms
	Fields map[string]string
}

// LandlockAccess is a type 1423 record: one denied access.
type LandlockAccess struct {
	Serial   uint64
	TimeMS   int64
	Domain   string   // hex domain id
	Blockers []string // e.g. fs.read_file
	Path     string   // the denied path, when the request had one
	PID      int      // when the record carries one
	Comm     string
}

// LandlockDomain is a type 1424 record: a domain's first appearance
// (status=allocated, with the pid that created it) or its end
// (status=deallocated, with its denial count).
type LandlockDomain struct {
	Serial  uint64
	TimeMS  int64
	Domain  string
	Status  string // allocated or deallocated
	Mode    string // enforcing or ...
	PID     int    // creator of the domain (allocated)
	Denials uint64 // (deallocated)
}

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("malformed audit record")

// maxFields bounds the fields of one record.
const maxFields = 64

// Parse parses the text of one audit netlink message of type typ:
// "audit(1700000000.123:456): key=value key="quoted value" ...".
func Parse(typ uint16, msg []byte) (Record, error) {
	s := strings.TrimRight(string(msg), "\x00\n")
	rest, ok := strings.CutPrefix(s, "audit(")
	if !ok {
		return Record{}, fmt.Errorf("%w: no audit( header", ErrMalformed)
	}
	end := strings.IndexByte(rest, ')')
	if end < 0 {
		return Record{}, fmt.Errorf("%w: header not closed", ErrMalformed)
	}
	stamp, serialStr, ok := strings.Cut(rest[:end], ":")
	if !ok {
		return Record{}, fmt.Errorf("%w: header without serial", ErrMalformed)
	}
	secStr, msStr, ok := strings.Cut(stamp, ".")
	if !ok {
		return Record{}, fmt.Errorf("%w: timestamp without milliseconds", ErrMalformed)
	}
	sec, err1 := strconv.ParseInt(secStr, 10, 64)
	ms, err2 := strconv.ParseInt(msStr, 10, 64)
	serial, err3 := strconv.ParseUint(serialStr, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || sec < 0 || sec > 1<<40 || ms < 0 || ms > 999 {
		return Record{}, fmt.Errorf("%w: bad header numbers", ErrMalformed)
	}
	body := strings.TrimPrefix(rest[end+1:], ":")
	fields, err := parseFields(body)
	if err != nil {
		return Record{}, err
	}
	return Record{Type: typ, Serial: serial, TimeMS: sec*1000 + ms, Fields: fields}, nil
}

// parseFields splits key=value pairs; values are bare, "double-quoted", or
// hex-encoded (the kernel's audit_log_untrustedstring encoding for values
// with spaces, quotes or control characters).
func parseFields(s string) (map[string]string, error) {
	out := make(map[string]string, 8)
	i := 0
	for {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("%w: field without '='", ErrMalformed)
		}
		key := s[i : i+eq]
		if strings.ContainsAny(key, " \"") {
			return nil, fmt.Errorf("%w: bad field name", ErrMalformed)
		}
		i += eq + 1
		var val string
		if i < len(s) && s[i] == '"' {
			close := strings.IndexByte(s[i+1:], '"')
			if close < 0 {
				return nil, fmt.Errorf("%w: unterminated quote in %s", ErrMalformed, key)
			}
			val = s[i+1 : i+1+close]
			i += close + 2
		} else {
			sp := strings.IndexByte(s[i:], ' ')
			if sp < 0 {
				sp = len(s) - i
			}
			val = s[i : i+sp]
			i += sp
		}
		if len(out) >= maxFields {
			return nil, fmt.Errorf("%w: more than %d fields", ErrMalformed, maxFields)
		}
		if _, dup := out[key]; !dup {
			out[key] = val
		}
	}
}

// untrusted decodes a value logged with audit_log_untrustedstring: quoted
// values were taken out of their quotes by parseFields; bare values of
// even length made only of hex digits are hex-encoded. "(null)" and "?"
// mean absent.
func untrusted(v string, quoted bool) string {
	if quoted || v == "" || v == "(null)" || v == "?" {
		if v == "(null)" || v == "?" {
			return ""
		}
		return v
	}
	if b, err := hex.DecodeString(v); err == nil {
		return string(b)
	}
	return v
}

// Landlock turns a record of type 1423 or 1424 into its typed form. raw is
// the message again, needed to tell quoted values from hex-encoded ones.
func (r Record) Landlock(raw []byte) (any, error) {
	switch r.Type {
	case TypeLandlockAccess:
		a := LandlockAccess{Serial: r.Serial, TimeMS: r.TimeMS, Domain: r.Fields["domain"]}
		if !isHexID(a.Domain) {
			return nil, fmt.Errorf("%w: landlock access record without a hex domain", ErrMalformed)
		}
		if b := r.Fields["blockers"]; b != "" {
			a.Blockers = strings.Split(b, ",")
			if len(a.Blockers) > 64 {
				return nil, fmt.Errorf("%w: too many blockers", ErrMalformed)
			}
		}
		if p, ok := r.Fields["path"]; ok {
			a.Path = untrusted(p, isQuoted(raw, "path"))
		}
		if c, ok := r.Fields["comm"]; ok {
			a.Comm = untrusted(c, isQuoted(raw, "comm"))
		}
		a.PID = atoiOrZero(r.Fields["pid"])
		return a, nil
	case TypeLandlockDomain:
		d := LandlockDomain{Serial: r.Serial, TimeMS: r.TimeMS, Domain: r.Fields["domain"], Status: r.Fields["status"], Mode: r.Fields["mode"]}
		if !isHexID(d.Domain) {
			return nil, fmt.Errorf("%w: landlock domain record without a hex domain", ErrMalformed)
		}
		d.PID = atoiOrZero(r.Fields["pid"])
		d.Denials, _ = strconv.ParseUint(r.Fields["denials"], 10, 64)
		return d, nil
	}
	return nil, fmt.Errorf("%w: type %d is not a Landlock record", ErrMalformed, r.Type)
}

func isQuoted(raw []byte, key string) bool {
	return strings.Contains(string(raw), " "+key+"=\"")
}

func isHexID(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil
}

func atoiOrZero(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<22 {
		return 0
	}
	return n
}
