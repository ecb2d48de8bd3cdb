package main

func isSandboxHelper() bool { return false }

func runSandboxHelper() int { return exitInternal }
