package main

import "context"

func cmdQuery(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
