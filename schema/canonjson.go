package schema

import (
	"slices"
	"strconv"

	"github.com/mcpwarden/mcpwarden/schema/jsonenc"
)

// appendCanonicalJSON appends c's canonical JSON, the bytes the scope hash
// is taken of: byte for byte what json.Marshal writes for c (the field
// order of CanonicalScope, HTML escaping on, map keys sorted, nil slices
// as null, the omitempty fields left out when empty, times in RFC 3339
// with nanoseconds). It is written by hand because building
// encoding/json's encoder of CanonicalScope cost about a tenth of a
// millisecond of CPU in every launch, for the one value it encoded.
// TestCanonicalJSONMatchesEncodingJSON and FuzzCanonicalJSON hold it to
// json.Marshal; TestCanonicalJSONKnowsEveryField fails when a field is
// added to CanonicalScope (or to a type it holds) and not here.
func appendCanonicalJSON(b []byte, c *CanonicalScope) ([]byte, error) {
	b = append(b, `{"scope_id":`...)
	b = jsonenc.AppendString(b, c.ScopeID)
	b = append(b, `,"base":`...)
	b = jsonenc.AppendString(b, c.Base)
	b = append(b, `,"allowed_paths":`...)
	if c.AllowedPaths == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range c.AllowedPaths {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"path":`...)
			b = jsonenc.AppendString(b, p.Path)
			b = append(b, `,"kind":`...)
			b = jsonenc.AppendString(b, string(p.Kind))
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"resource_refs":`...)
	b = appendStrings(b, c.ResourceRefs)
	b = append(b, `,"access_mode":`...)
	b = jsonenc.AppendString(b, string(c.AccessMode))
	b = append(b, `,"tool_allowlist":`...)
	b = appendStrings(b, c.ToolAllowlist)
	b = append(b, `,"approval":`...)
	b = jsonenc.AppendString(b, string(c.Approval))
	b = append(b, `,"expires_after_minutes":`...)
	b = strconv.AppendInt(b, int64(c.ExpiresAfterMinutes), 10)
	var err error
	if c.IssuedAt != nil {
		if b, err = appendTime(append(b, `,"issued_at":`...), c.IssuedAt); err != nil {
			return nil, err
		}
	}
	if c.ExpiresAt != nil {
		if b, err = appendTime(append(b, `,"expires_at":`...), c.ExpiresAt); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"network":{`...)
	if len(c.Network.ConnectTCP) > 0 {
		b = appendInts(append(b, `"connect_tcp":`...), c.Network.ConnectTCP)
	}
	if len(c.Network.BindTCP) > 0 {
		if len(c.Network.ConnectTCP) > 0 {
			b = append(b, ',')
		}
		b = appendInts(append(b, `"bind_tcp":`...), c.Network.BindTCP)
	}
	b = append(b, '}')
	if a := c.Attribution; a != nil {
		b = append(b, `,"attribution":{"required":`...)
		b = strconv.AppendBool(b, a.Required)
		if a.MetaKey != "" {
			b = append(b, `,"meta_key":`...)
			b = jsonenc.AppendString(b, a.MetaKey)
		}
		b = append(b, '}')
	}
	if len(c.ToolClasses) > 0 {
		b = appendObject(append(b, `,"tool_classes":`...), c.ToolClasses, jsonenc.AppendString)
	}
	if len(c.ToolPathArgs) > 0 {
		b = appendObject(append(b, `,"tool_path_args":`...), c.ToolPathArgs, appendStrings)
	}
	if len(c.PromptAllowlist) > 0 {
		b = appendStrings(append(b, `,"prompt_allowlist":`...), c.PromptAllowlist)
	}
	b = append(b, `,"allow_io_uring":`...)
	b = strconv.AppendBool(b, c.AllowIOUring)
	if l := c.Limits; l != nil {
		b = append(b, `,"limits":{`...)
		first := true
		for _, f := range []struct {
			key string
			v   int64
		}{{`"max_processes":`, l.MaxProcesses}, {`"max_memory_mb":`, l.MaxMemoryMB}, {`"max_file_size_mb":`, l.MaxFileSizeMB}} {
			if f.v == 0 {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = strconv.AppendInt(append(b, f.key...), f.v, 10)
		}
		b = append(b, '}')
	}
	if c.RequireIsolation {
		b = append(b, `,"require_isolation":true`...)
	}
	return append(b, '}'), nil
}

// appendStrings writes a list of strings; nil is null, as encoding/json
// writes it.
func appendStrings[S ~string](b []byte, list []S) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, string(s))
	}
	return append(b, ']')
}

// appendInts writes a list of ints; nil is null.
func appendInts(b []byte, list []int) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, n := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return append(b, ']')
}

// appendTime writes t as its MarshalJSON does (and refuses what it
// refuses: a year outside 0-9999).
func appendTime(b []byte, t interface{ MarshalJSON() ([]byte, error) }) ([]byte, error) {
	j, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// appendObject appends m as a JSON object, its keys sorted (as
// encoding/json writes a map), each value by value.
func appendObject[V any](b []byte, m map[string]V, value func([]byte, V) []byte) []byte {
	b = append(b, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b = append(b, ',')
		}
		b = value(append(jsonenc.AppendString(b, k), ':'), m[k])
	}
	return append(b, '}')
}

// sortedKeys is m's keys in the order encoding/json writes them (byte
// order of the keys).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
