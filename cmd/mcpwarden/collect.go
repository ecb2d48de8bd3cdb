package main

import "context"

func cmdCollect(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
