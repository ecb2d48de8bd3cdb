package policy

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// ArgKind says how a tool's argument is read.
type ArgKind int

const (
	ArgPath     ArgKind = iota + 1 // a string path
	ArgPathList                    // an array of string paths (a single string is accepted)
	ArgGlob                        // a glob evaluated under the call's path
	ArgGlobList                    // an array of such globs
	ArgText                        // free text: content, edits (never checked)
	// ArgScalar is a count, a flag or a word (head, tail, dryRun, sortBy):
	// a number or a boolean is never a path, but a string in it is checked
	// as an unknown tool's argument: a server whose tool of the same name
	// takes a path there (a tool list changed to another schema) would
	// read it.
	ArgScalar
)

// scalarWords are the words the filesystem server takes in an ArgScalar
// argument (its schema's enum): they pass as they are, since a file of
// that name under the server's working directory would otherwise refuse
// the real server's own call.
var scalarWords = map[string][]string{"sortBy": {"name", "size"}}

// ArgSpec names one argument of a table tool.
type ArgSpec struct {
	Name string
	Kind ArgKind
}

// Tool is one row of the built-in table: the class of the tool and every
// argument it takes. An argument the row does not name (a server with a
// tool of the same name may take more) is checked like any argument of an
// unknown tool.
type Tool struct {
	Class Class
	Args  []ArgSpec
	// Moves: the tool moves, renames or copies its path arguments, so the
	// subtree under each must hold no secret (see checkSubtree).
	Moves bool
}

// fsTools is the official filesystem server's tool set
// (@modelcontextprotocol/server-filesystem 2026.8.31), matched by name
// whatever the server: a tool of the same name is read the same way.
var fsTools = map[string]Tool{
	"read_text_file":            {ClassRead, []ArgSpec{{"path", ArgPath}, {"head", ArgScalar}, {"tail", ArgScalar}}, false},
	"read_file":                 {ClassRead, []ArgSpec{{"path", ArgPath}, {"head", ArgScalar}, {"tail", ArgScalar}}, false},
	"read_media_file":           {ClassRead, []ArgSpec{{"path", ArgPath}}, false},
	"read_multiple_files":       {ClassRead, []ArgSpec{{"paths", ArgPathList}}, false},
	"list_directory":            {ClassRead, []ArgSpec{{"path", ArgPath}}, false},
	"list_directory_with_sizes": {ClassRead, []ArgSpec{{"path", ArgPath}, {"sortBy", ArgScalar}}, false},
	"directory_tree":            {ClassRead, []ArgSpec{{"path", ArgPath}, {"excludePatterns", ArgGlobList}}, false},
	"search_files":              {ClassRead, []ArgSpec{{"path", ArgPath}, {"pattern", ArgGlob}, {"excludePatterns", ArgGlobList}}, false},
	"get_file_info":             {ClassRead, []ArgSpec{{"path", ArgPath}}, false},
	"list_allowed_directories":  {ClassRead, nil, false},
	"create_directory":          {ClassWrite, []ArgSpec{{"path", ArgPath}}, false},
	"write_file":                {ClassDestructive, []ArgSpec{{"path", ArgPath}, {"content", ArgText}}, false}, // overwrites
	"edit_file":                 {ClassDestructive, []ArgSpec{{"path", ArgPath}, {"edits", ArgText}, {"dryRun", ArgScalar}}, false},
	"move_file":                 {ClassDestructive, []ArgSpec{{"source", ArgPath}, {"destination", ArgPath}}, true},
}

// BuiltinTool returns the built-in table's row for a tool name, for tools
// (mcpwarden profile learn, wrap) that propose a scope's tool_classes.
func BuiltinTool(name string) (Tool, bool) {
	t, ok := fsTools[name]
	return t, ok
}

// moveWords are the name parts of tools that move, rename or copy.
var moveWords = map[string]bool{
	"move": true, "mv": true, "rename": true, "copy": true, "cp": true, "duplicate": true, "relocate": true, "clone": true,
}

// MovesByName reports whether a tool's name says it moves, renames or
// copies ("move_file", "renameFolder", "copy-tree", "mv"): its path
// arguments' subtrees are checked for secrets even when the table does
// not know the tool.
//
// It runs on every call of a tool the table does not know: an ASCII name
// is split and looked up in place, without allocating (the words nameWords
// would make, split by the same rules: FuzzMovesByNameAgrees); any other
// name goes through nameWords.
func MovesByName(name string) bool {
	var buf [16]byte // the current word, lower-cased: every move word fits
	n := 0           // its length in buf; -1: longer than buf, so no move word
	prevLower := false
	for i := 0; i <= len(name); i++ {
		var c byte
		if i < len(name) {
			if c = name[i]; c >= utf8.RuneSelf {
				return movesByWords(name)
			}
		}
		sep := i == len(name) || c == '_' || c == '-' || c == '.' || c == '/' || c == ' '
		upper := 'A' <= c && c <= 'Z'
		if sep || upper && prevLower {
			if n > 0 && moveWords[string(buf[:n])] {
				return true
			}
			n = 0
			if sep {
				prevLower = false
				continue
			}
		}
		switch {
		case n < 0:
		case n == len(buf):
			n = -1
		case upper:
			buf[n] = c + ('a' - 'A')
			n++
		default:
			buf[n] = c
			n++
		}
		prevLower = 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
	}
	return false
}

// movesByWords is MovesByName through nameWords.
func movesByWords(name string) bool {
	for _, w := range nameWords(name) {
		if moveWords[w] {
			return true
		}
	}
	return false
}

// nameWords splits a tool name at '_', '-', '.', '/' and lower→upper case
// changes, lower-cased.
func nameWords(name string) []string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	prevLower := false
	for _, r := range name {
		switch {
		case r == '_' || r == '-' || r == '.' || r == '/' || r == ' ':
			flush()
			prevLower = false
			continue
		case unicode.IsUpper(r) && prevLower:
			flush()
		}
		cur = append(cur, r)
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	flush()
	return words
}

// Hints are a server's tool annotations (MCP ToolAnnotations), which are
// untrusted: they only propose a class for an operator to review.
type Hints struct {
	ReadOnly    *bool // readOnlyHint (default false)
	Destructive *bool // destructiveHint (default true)
}

// ProposeClass proposes a tool_classes entry for a tool seen in a
// tools/list probe (mcpwarden wrap, profile learn): the built-in table's
// class when it knows the tool, else what the annotations claim — read for
// readOnlyHint true, write for destructiveHint false, else destructive
// (MCP's defaults). The proxy itself never reads annotations: a proposal
// takes effect only once a reviewer writes it into the scope.
func ProposeClass(name string, h Hints) Class {
	if t, ok := fsTools[name]; ok {
		return t.Class
	}
	switch {
	case h.ReadOnly != nil && *h.ReadOnly:
		return ClassRead
	case h.Destructive != nil && !*h.Destructive:
		return ClassWrite
	}
	return ClassDestructive
}
