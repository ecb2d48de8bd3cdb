package main

import "context"

func cmdEvents(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
