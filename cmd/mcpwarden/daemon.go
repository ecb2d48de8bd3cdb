package main

import "context"

func cmdDaemon(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
