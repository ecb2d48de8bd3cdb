package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullCanonical sets every field of CanonicalScope and of the types it
// holds (TestCanonicalJSONKnowsEveryField checks that it does).
func fullCanonical() *CanonicalScope {
	issued := time.Date(2026, 12, 8, 1, 2, 3, 456789000, time.UTC)
	expires := time.Date(2026, 12, 8, 3, 0, 0, 0, time.FixedZone("X", 3600))
	return &CanonicalScope{
		ScopeID:             "scope-<1>&\"q\"\\",
		Base:                "/home/u/proj\u2028x",
		AllowedPaths:        []CanonicalPath{{Path: "/home/u/proj/a", Kind: KindDir}, {Path: "/home/u/proj/b\x01\xff", Kind: KindFile}},
		ResourceRefs:        []string{"res://a", "res://<b>"},
		AccessMode:          AccessWrite,
		ToolAllowlist:       []string{"read_text_file", "write_file"},
		Approval:            ApprovalRequiredForWrite,
		ExpiresAfterMinutes: 90,
		IssuedAt:            &issued,
		ExpiresAt:           &expires,
		Network:             NetworkGrant{ConnectTCP: []int{443, 80}, BindTCP: []int{8080}},
		Attribution:         &Attribution{Required: true, MetaKey: "trace<parent>"},
		ToolClasses:         map[string]string{"z": "read", "a": "write", "a<": "destructive", "A": "read", "é": "write"},
		ToolPathArgs:        map[string][]string{"t": {"/options/target", "where"}, "s": nil, "r": {}},
		PromptAllowlist:     []string{"p1", "p\u20292"},
		AllowIOUring:        true,
		Limits:              &Limits{MaxProcesses: 64, MaxMemoryMB: 512, MaxFileSizeMB: 10},
		RequireIsolation:    true,
		Hash:                "sha256:not-encoded",
		NotAfter:            expires,
	}
}

func checkCanonicalJSON(t *testing.T, c *CanonicalScope) {
	t.Helper()
	want, wantErr := json.Marshal(c)
	got, err := appendCanonicalJSON(nil, c)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("error %v, encoding/json's %v", err, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical JSON differs from encoding/json's:\n got %s\nwant %s", got, want)
	}
}

func TestCanonicalJSONMatchesEncodingJSON(t *testing.T) {
	year10k := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	zero := time.Time{}
	cases := map[string]func(c *CanonicalScope){
		"full":       func(c *CanonicalScope) {},
		"zero value": func(c *CanonicalScope) { *c = CanonicalScope{} },
		"empty lists, not nil": func(c *CanonicalScope) {
			c.AllowedPaths, c.ResourceRefs, c.ToolAllowlist = []CanonicalPath{}, []string{}, []string{}
		},
		"nil lists":                 func(c *CanonicalScope) { c.AllowedPaths, c.ResourceRefs, c.ToolAllowlist = nil, nil, nil },
		"no times":                  func(c *CanonicalScope) { c.IssuedAt, c.ExpiresAt = nil, nil },
		"zero time":                 func(c *CanonicalScope) { c.IssuedAt = &zero },
		"year out of range":         func(c *CanonicalScope) { c.ExpiresAt = &year10k },
		"connect only":              func(c *CanonicalScope) { c.Network.BindTCP = nil },
		"bind only":                 func(c *CanonicalScope) { c.Network.ConnectTCP = []int{} },
		"no network":                func(c *CanonicalScope) { c.Network = NetworkGrant{} },
		"negative port":             func(c *CanonicalScope) { c.Network.ConnectTCP = []int{-1, 0} },
		"attribution without key":   func(c *CanonicalScope) { c.Attribution = &Attribution{} },
		"no attribution":            func(c *CanonicalScope) { c.Attribution = nil },
		"empty maps":                func(c *CanonicalScope) { c.ToolClasses, c.ToolPathArgs = map[string]string{}, map[string][]string{} },
		"nil maps":                  func(c *CanonicalScope) { c.ToolClasses, c.ToolPathArgs = nil, nil },
		"empty map key":             func(c *CanonicalScope) { c.ToolClasses = map[string]string{"": "x", "\x00": "y"} },
		"empty prompt list":         func(c *CanonicalScope) { c.PromptAllowlist = []string{} },
		"limits empty":              func(c *CanonicalScope) { c.Limits = &Limits{} },
		"limits memory only":        func(c *CanonicalScope) { c.Limits = &Limits{MaxMemoryMB: 1} },
		"limits file size only":     func(c *CanonicalScope) { c.Limits = &Limits{MaxFileSizeMB: -5} },
		"limits processes and size": func(c *CanonicalScope) { c.Limits = &Limits{MaxProcesses: 1 << 40, MaxFileSizeMB: 2} },
		"no limits, no isolation":   func(c *CanonicalScope) { c.Limits, c.RequireIsolation, c.AllowIOUring = nil, false, false },
		"negative minutes":          func(c *CanonicalScope) { c.ExpiresAfterMinutes = -3 },
		"every escape in one string": func(c *CanonicalScope) {
			c.ScopeID = "\"\\\b\f\n\r\t\x00\x1f<>&\u2028\u2029\x7f\xc3\x28\xed\xa0\x80é☃𝄞"
		},
		"an empty string everywhere":  func(c *CanonicalScope) { c.ScopeID, c.Base, c.AccessMode, c.Approval = "", "", "", "" },
		"a path of every kind string": func(c *CanonicalScope) { c.AllowedPaths = []CanonicalPath{{}, {Path: "/", Kind: "other<"}} },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			c := fullCanonical()
			mod(c)
			checkCanonicalJSON(t, c)
		})
	}
}

// TestCanonicalJSONKnowsEveryField fails when a field is added to
// CanonicalScope or to a type it holds and fullCanonical (so the check
// above) does not set it: add it to appendCanonicalJSON and to
// fullCanonical.
func TestCanonicalJSONKnowsEveryField(t *testing.T) {
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				t.Errorf("%s is nil in fullCanonical", path)
				return
			}
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(time.Time{}) {
				if v.Interface().(time.Time).IsZero() {
					t.Errorf("%s is zero in fullCanonical", path)
				}
				return
			}
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				walk(path+"."+f.Name, v.Field(i))
			}
		case reflect.Slice:
			if v.Len() == 0 {
				t.Errorf("%s is empty in fullCanonical", path)
				return
			}
			walk(path+"[0]", v.Index(0))
		case reflect.Map:
			if v.Len() == 0 {
				t.Errorf("%s is empty in fullCanonical", path)
			}
		default:
			if v.IsZero() {
				t.Errorf("%s is zero in fullCanonical", path)
			}
		}
	}
	walk("CanonicalScope", reflect.ValueOf(fullCanonical()))
}

// TestScopeHashIsSHA256OfEncodingJSON holds the hash of a canonicalized
// scope to its definition: the SHA-256 of json.Marshal of the canonical
// scope.
func TestScopeHashIsSHA256OfEncodingJSON(t *testing.T) {
	in := strings.Replace(validScope, `"expires_after_minutes": 30`, `"expires_after_minutes": 30, "tool_path_args": {"t": ["where", "/options/target"]}, "tool_classes": {"b": "read", "a": "write"}, "prompt_allowlist": ["b", "a"], "network": {"connect_tcp": [443, 80]}, "limits": {"max_memory_mb": 64}, "attribution": {"required": true}, "issued_at": "2026-12-08T00:00:00.5+01:00"`, 1)
	s, err := ParseScope([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	s.AllowedPaths = []string{"workspace/src", "workspace/tests"}
	c, err := Canonicalize(s, newBase(t), time.Date(2026, 12, 7, 23, 10, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canon)
	if want := "sha256:" + hex.EncodeToString(sum[:]); c.Hash != want {
		t.Fatalf("hash %s, want %s (of %s)", c.Hash, want, canon)
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	f.Add("id", "/base", "/base/a", "dir", "read", "none", "tool", "meta", int64(30), int64(0), uint16(0xffff), true)
	f.Add("<&>", "\xff", "\u2028", "", "", "", "", "", int64(-1), int64(1<<40), uint16(0), false)
	f.Fuzz(func(t *testing.T, id, base, path, kind, mode, approval, tool, meta string, minutes, limit int64, shape uint16, flag bool) {
		bit := func(i uint) bool { return shape&(1<<i) != 0 }
		c := &CanonicalScope{
			ScopeID: id, Base: base, AccessMode: AccessMode(mode), Approval: ApprovalRule(approval),
			ExpiresAfterMinutes: int(minutes), AllowIOUring: flag, RequireIsolation: bit(0),
		}
		if bit(1) {
			c.AllowedPaths = []CanonicalPath{{Path: path, Kind: PathKind(kind)}, {Path: base, Kind: KindDir}}
		} else if bit(2) {
			c.AllowedPaths = []CanonicalPath{}
		}
		if bit(3) {
			c.ResourceRefs, c.ToolAllowlist = []string{path, id}, []string{tool}
		} else if bit(4) {
			c.ResourceRefs, c.ToolAllowlist = []string{}, []string{}
		}
		if bit(5) {
			ts := time.Unix(minutes, limit%1e9).In(time.FixedZone(meta, int(limit%86400)))
			c.IssuedAt = &ts
		}
		if bit(6) {
			ts := time.Unix(limit, minutes%1e9).UTC()
			c.ExpiresAt = &ts
		}
		if bit(7) {
			c.Network.ConnectTCP = []int{int(minutes), int(limit)}
		}
		if bit(8) {
			c.Network.BindTCP = []int{int(limit)}
		}
		if bit(9) {
			c.Attribution = &Attribution{Required: flag, MetaKey: meta}
		}
		if bit(10) {
			c.ToolClasses = map[string]string{tool: kind, meta: mode, id: approval}
		}
		if bit(11) {
			c.ToolPathArgs = map[string][]string{tool: {path, meta}, id: nil, base: {}}
		}
		if bit(12) {
			c.PromptAllowlist = []string{meta, tool}
		}
		if bit(13) {
			c.Limits = &Limits{MaxProcesses: limit, MaxMemoryMB: minutes}
		}
		if bit(14) {
			c.Limits = &Limits{MaxFileSizeMB: limit}
		}
		checkCanonicalJSON(t, c)
	})
}
