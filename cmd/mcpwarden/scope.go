package main

import "context"

func cmdScope(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
