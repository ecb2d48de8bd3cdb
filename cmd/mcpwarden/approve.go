package main

import "context"

func cmdApprove(ctx context.Context, args []string) int {
	return fail(exitInternal, errNotBuilt)
}
