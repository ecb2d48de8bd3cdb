package seccomp

//go:generate sh -c "go run ./internal/mksyscalls -sys $(go list -m -f '{{.Dir}}' golang.org/x/sys)"
