package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes the report for a person: the run, then each denial and
// finding (the most severe first) with its path and what would grant it.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s on %s", rep.RunID, rep.Host)
	if rep.Server != "" {
		fmt.Fprintf(&b, ": server %s", rep.Server)
		if rep.ServerVersion != "" {
			fmt.Fprintf(&b, " %s", rep.ServerVersion)
		}
		if rep.ProtocolEra != "" {
			fmt.Fprintf(&b, " (%s)", rep.ProtocolEra)
		}
	}
	if rep.Mode != "" {
		fmt.Fprintf(&b, ", %s mode", rep.Mode)
	}
	fmt.Fprintf(&b, ", scope %s %s\n", dash(rep.ScopeID), dash(rep.ScopeHash))
	fmt.Fprintf(&b, "%d events from %s; %d of %d paths told among %d candidates\n", rep.Events, rep.Source, rep.Resolved, rep.Resolved+rep.Unresolved, rep.Candidates)
	items := severityOrder(rep.Items)
	if len(items) == 0 {
		b.WriteString("\nno denial and no finding: nothing to explain\n")
	}
	for _, it := range items {
		b.WriteString("\n")
		fmt.Fprintf(&b, "%s  %s", time.Unix(0, it.FirstNS).UTC().Format("15:04:05.000"), it.What)
		if it.Tool != "" {
			fmt.Fprintf(&b, "  tool=%s", it.Tool)
		}
		if it.Count > 1 {
			fmt.Fprintf(&b, "  x%d", it.Count)
		}
		b.WriteString("\n")
		if it.PathHash != "" {
			path := it.Path
			if path == "" {
				path = "(not found: hash " + it.PathHash[:16] + ")"
			}
			fmt.Fprintf(&b, "    %s %s", dash(it.Access), path)
			if it.Class != "" {
				fmt.Fprintf(&b, "  [%s]", it.Class)
			}
			if it.Process != "" {
				fmt.Fprintf(&b, "  (%s)", it.Process)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "    -> %s\n", it.Grant)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
