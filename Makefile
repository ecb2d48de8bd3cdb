# mcpwarden build, test and benchmark entry points.
# `make test` is what CI runs (.ci/run); it installs and starts what the tests
# need, runs every test (race detector on), then stops what it started.

GO        ?= go
BIN       := bin/mcpwarden
PKGS      := ./...
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
TESTFLAGS ?=
# Each package's tests may take a while on 2 cores with real services.
TEST_TIMEOUT ?= 30m

.PHONY: all build test test-go deps lint bench generate generate-check demo clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mcpwarden

# deps installs (idempotently) what the tests need: Debian packages, the
# pinned MCP servers from npm, Go tools.
deps:
	scripts/test-env.sh install

test: deps build
	@scripts/test-env.sh up
	@rc=0; $(MAKE) --no-print-directory lint generate-check test-go || rc=$$?; \
		scripts/test-env.sh down; exit $$rc

test-go:
	MCPWARDEN_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$$($(GO) env GOPATH)/bin/staticcheck $(PKGS)

# bench runs every Go benchmark; docs/benchmarks.md summarises the figures
# against the targets and names the exact command behind each.
bench: deps build
	@scripts/test-env.sh up
	@rc=0; MCPWARDEN_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 60m $(PKGS) || rc=$$?; \
		scripts/test-env.sh down; exit $$rc

generate:
	$(GO) generate ./...

# generate-check proves the committed generated code is current.
generate-check:
	scripts/generate-check.sh

demo: build
	scripts/test-env.sh install-npm
	scripts/demo.sh

clean:
	rm -rf bin build
