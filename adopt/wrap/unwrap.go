package wrap

import (
	"context"
	"fmt"

	"github.com/mcpwarden/mcpwarden/adopt/clientconfig"
	"github.com/mcpwarden/mcpwarden/adopt/jsonedit"
	"github.com/mcpwarden/mcpwarden/adopt/textdiff"
)

// Unwrap restores the wrapped servers of a configuration. An entry whose
// text is still what wrap wrote gets its original text back, byte for
// byte; one changed since (by hand, by the client) is rebuilt from its
// arguments after "--". Scope files stay where they are.
func Unwrap(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := clientconfig.Read(o.Config, o.Format)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	rep := &Report{Config: c.Real, Format: string(c.Format), DryRun: o.DryRun, Record: recordPath(o.StateDir, c.Real)}
	rec, err := readRecord(rep.Record, c.Real)
	if err != nil {
		return rep, err
	}
	for _, name := range o.Servers {
		if c.Entry(name) == nil {
			return rep, fmt.Errorf("%w: %s has no server %q", ErrConfig, o.Config, name)
		}
	}
	var edits []jsonedit.Edit
	var restored []string
	for _, e := range c.Entries {
		er := EntryReport{Name: e.Name}
		switch {
		case len(o.Servers) > 0 && !contains(o.Servers, e.Name):
			er.Status = StatusSkipped
		case e.Transport == clientconfig.Remote:
			er.Status, er.URL = StatusRemote, redactURL(e.URL)
		case e.Wrapped == nil:
			er.Status = StatusNotOurs
		default:
			er.Status, er.Scope = StatusRestored, e.Wrapped.Scope
			r, ok := rec.Entries[e.Name]
			if ok && sha(c.Raw(e.Node)) == r.WrappedSHA256 {
				edits = append(edits, c.ReplaceEntry(e, r.Original))
				er.Exact = true
			} else {
				ed, err := rebuild(c, e)
				if err != nil {
					er.Status, er.Reason = StatusFailed, err.Error()
					break
				}
				edits = append(edits, ed...)
				er.Reason = "the entry changed since wrap (or wrap's record is gone): rebuilt from its arguments after '--', so its formatting may differ from the original"
			}
			restored = append(restored, e.Name)
		}
		rep.Entries = append(rep.Entries, er)
	}
	if len(edits) == 0 {
		return rep, nil
	}
	out, err := jsonedit.Apply(c.Doc.Src, edits)
	if err != nil {
		return rep, err
	}
	if _, err := clientconfig.Parse(out, c.Path, c.Format); err != nil {
		return rep, fmt.Errorf("unwrap: the restored file does not parse (the record does not fit it): %w", err)
	}
	rep.Changed = true
	rep.Diff = textdiff.Unified(c.Path, c.Path+" (unwrapped)", string(c.Doc.Src), string(out))
	if o.DryRun {
		return rep, nil
	}
	if err := replaceConfig(c, out); err != nil {
		return rep, err
	}
	for _, n := range restored {
		delete(rec.Entries, n)
	}
	if err := writeRecord(rep.Record, rec); err != nil {
		return rep, fmt.Errorf("update the wrap record: %w", err)
	}
	return rep, nil
}

// rebuild turns a wrapped entry back into its server's own command and
// arguments, the elements after "--" in their own bytes.
func rebuild(c *clientconfig.Config, e *clientconfig.Entry) ([]jsonedit.Edit, error) {
	dash := -1
	for i, a := range e.Args {
		if a == "--" {
			dash = i
			break
		}
	}
	if dash < 0 || dash+1 >= len(e.Args) {
		return nil, fmt.Errorf("its mcpwarden arguments have no server command after '--': fix the entry by hand")
	}
	var args []string
	for i := dash + 2; i < len(e.Args); i++ {
		args = append(args, c.ArgRaw(e, i))
	}
	return c.SetCommand(e, c.ArgRaw(e, dash+1), args), nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
