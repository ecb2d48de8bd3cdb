package clientconfig

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/mcpwarden/mcpwarden/adopt/jsonedit"
)

func ownerOf(st os.FileInfo) (int, int) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), int(s.Gid)
	}
	return -1, -1
}

// Raw returns a node's bytes as they are in the file.
func (c *Config) Raw(n *jsonedit.Node) string { return string(c.Doc.Src[n.Start:n.End]) }

// CommandRaw and ArgRaw return the entry's command and i-th argument as
// they are written in the file (their escapes kept).
func (c *Config) CommandRaw(e *Entry) string { return c.Raw(e.command.Value) }

func (c *Config) ArgRaw(e *Entry, i int) string { return c.Raw(e.args.Value.Elems[i]) }

// SetCommand returns the edits that make a stdio entry start command
// (raw JSON text) with args (each raw JSON text). The args array keeps the
// layout of the one it replaces: one element per line when the old one had
// its elements on separate lines, else on one line. An entry without args
// gets the member after its command.
func (c *Config) SetCommand(e *Entry, command string, args []string) []jsonedit.Edit {
	src := c.Doc.Src
	edits := []jsonedit.Edit{{Start: e.command.Value.Start, End: e.command.Value.End, Text: command}}
	if e.args != nil {
		a := e.args.Value
		edits = append(edits, jsonedit.Edit{Start: a.Start, End: a.End, Text: c.arrayLike(a, args)})
		return edits
	}
	// Insert `,<sep>"args": [...]` right after the command's value: the
	// separator repeats what stands between the entry's members.
	sep := " "
	if ind, ok := jsonedit.Indent(src, e.command.KeyStart); ok {
		sep = "\n" + ind
		if strings.Contains(string(src[e.Node.Start:e.command.KeyStart]), "\r\n") {
			sep = "\r\n" + ind
		}
	}
	text := fmt.Sprintf(",%s\"args\": [%s]", sep, strings.Join(args, ", "))
	edits = append(edits, jsonedit.Edit{Start: e.command.Value.End, End: e.command.Value.End, Text: text})
	return edits
}

// arrayLike formats elems (raw JSON texts) in the layout of old.
func (c *Config) arrayLike(old *jsonedit.Node, elems []string) string {
	src := c.Doc.Src
	oldText := string(src[old.Start:old.End])
	if len(old.Elems) == 0 || !strings.Contains(oldText, "\n") {
		return "[" + strings.Join(elems, ", ") + "]"
	}
	nl := "\n"
	if strings.Contains(oldText, "\r\n") {
		nl = "\r\n"
	}
	ind, ok := jsonedit.Indent(src, old.Elems[0].Start)
	closeInd, _ := jsonedit.Indent(src, old.End-1)
	if !ok {
		return "[" + strings.Join(elems, ", ") + "]"
	}
	var b strings.Builder
	b.WriteString("[")
	for i, el := range elems {
		b.WriteString(nl + ind + el)
		if i < len(elems)-1 {
			b.WriteString(",")
		}
	}
	b.WriteString(nl + closeInd + "]")
	return b.String()
}

// ReplaceEntry returns the edit that puts raw (an entry object's text) in
// place of the entry.
func (c *Config) ReplaceEntry(e *Entry, raw string) jsonedit.Edit {
	return jsonedit.Edit{Start: e.Node.Start, End: e.Node.End, Text: raw}
}

// Entry returns the entry called name, or nil.
func (c *Config) Entry(name string) *Entry {
	for _, e := range c.Entries {
		if e.Name == name {
			return e
		}
	}
	return nil
}
