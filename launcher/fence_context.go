package launcher

import (
	"context"

	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
)

type fenceKey struct{}

// withFence hands the ruleset about to be applied to Config.BeforeExec.
func withFence(ctx context.Context, rs *ruleset.Ruleset) context.Context {
	return context.WithValue(ctx, fenceKey{}, rs)
}

// FenceOf returns, inside Config.BeforeExec, the ruleset the helper is about
// to apply (in audit mode: the one it would have applied). The daemon client
// sends its runtime part so the daemon can tell runtime files from escapes.
func FenceOf(ctx context.Context) *ruleset.Ruleset {
	rs, _ := ctx.Value(fenceKey{}).(*ruleset.Ruleset)
	return rs
}
