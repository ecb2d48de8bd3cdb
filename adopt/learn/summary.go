package learn

import (
	"fmt"
	"strings"

	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/adopt/scopegen"
)

// Summary renders the proposal for a person.
func Summary(p *Proposal, proposalFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcpwarden profile learn: %s\n", strings.Join(p.Command, " "))
	if p.Server != "" {
		fmt.Fprintf(&b, "server: %s\n", p.Server)
	}
	fmt.Fprintf(&b, "base: %s\n\n", p.Base)

	fmt.Fprintf(&b, "Under the fence (enforce, %d run(s)):\n", len(p.Rounds))
	for i, r := range p.Rounds {
		grants := "no extra grants"
		if len(r.Grants) > 0 {
			grants = strings.Join(r.Grants, " ")
		}
		switch {
		case r.Started:
			fmt.Fprintf(&b, "  %d. %s: started and answered\n", i+1, grants)
		case r.Denied != "":
			fmt.Fprintf(&b, "  %d. %s: could not start, the fence denied %s\n", i+1, grants, r.Denied)
		default:
			fmt.Fprintf(&b, "  %d. %s: failed: %s\n", i+1, grants, firstLine(r.Failure))
		}
	}
	if !p.Started {
		fmt.Fprintf(&b, "  the server did NOT start under the fence with what learn could grant\n")
	}

	fmt.Fprintf(&b, "\nKernel view (audit mode): ")
	k := p.Kernel
	switch {
	case !k.Used:
		fmt.Fprintf(&b, "none. %s\n", k.Note)
	default:
		fmt.Fprintf(&b, "daemon at %s", k.Socket)
		if k.RunID != "" {
			fmt.Fprintf(&b, ", run %s: %d file operations; %d distinct paths outside the scope and runtime profile (%d named, %d not), %d of the secret class",
				k.RunID, k.FileOps, k.Escapes, k.Named, k.Unnamed, k.Secrets)
		}
		b.WriteString("\n")
		if k.Note != "" {
			fmt.Fprintf(&b, "  %s\n", k.Note)
		}
	}

	fmt.Fprintf(&b, "\nProposed runtime grants (flags of 'mcpwarden run'):\n")
	if len(p.Runtime) == 0 {
		fmt.Fprintf(&b, "  none needed\n")
	}
	for _, g := range p.Runtime {
		fmt.Fprintf(&b, "  %-50s %s\n", g.Flag, g.Why)
	}
	if len(p.ScopePaths) > 0 {
		fmt.Fprintf(&b, "\nPaths in the base the scope may need (allowed_paths, relative to the base):\n")
		for _, g := range p.ScopePaths {
			fmt.Fprintf(&b, "  %s: %s\n", g.Path, g.Why)
		}
	}
	if p.NeedsWrite {
		fmt.Fprintf(&b, "  the server wrote inside the base: the scope needs \"access_mode\": \"write\"\n")
	}

	fmt.Fprintf(&b, "\nTools (%d):\n", len(p.Tools))
	for _, t := range p.Tools {
		switch {
		case t.Problem != "":
			fmt.Fprintf(&b, "  %-28s cannot be allowed: %s\n", t.Name, t.Problem)
		case t.Class != "":
			fmt.Fprintf(&b, "  %-28s %s (mcpwarden's table)\n", t.Name, t.Class)
		default:
			hint := "no hints"
			if t.Hint != "" {
				hint = "the server claims " + t.Hint
			}
			fmt.Fprintf(&b, "  %-28s REVIEW: suggested %q (%s)\n", t.Name, scopegen.SuggestedClass(t), hint)
		}
		if len(t.PathArgs) > 0 && t.Class == "" {
			fmt.Fprintf(&b, "  %-28s   path arguments: %s (for tool_path_args)\n", "", strings.Join(t.PathArgs, ", "))
		}
	}
	if len(p.Enforce) > 0 || len(p.Audit) > 0 {
		fmt.Fprintf(&b, "\nScripted session: %s under the fence, %s in audit mode\n", okCount(p.Enforce), okCount(p.Audit))
		if len(p.Verified) > 0 {
			fmt.Fprintf(&b, "  with every proposed grant, under the fence: %s\n", okCount(p.Verified))
		}
	}
	if len(p.Notes) > 0 {
		fmt.Fprintf(&b, "\nNotes:\n")
		for _, n := range p.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nNothing was changed. The proposal (with a starting scope) is %s; review it before you use any of it.\n", proposalFile)
	return b.String()
}

func okCount(rs []probe.ScriptResult) string {
	ok := 0
	for _, r := range rs {
		if r.OK {
			ok++
		}
	}
	return fmt.Sprintf("%d of %d requests answered without error", ok, len(rs))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
