package main

import "context"

func cmdRun(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
