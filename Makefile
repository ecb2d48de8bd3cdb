# mcpwarden build, test and benchmark entry points.
# `make test` is what CI runs (.ci/run); it installs and starts what the tests
# need, runs every test (race detector on), then stops what it started.

GO        ?= go
BIN       := bin/mcpwarden
FENCE     := bin/mcpwarden-fence
EXECSTAGE := bin/mcpwarden-exec
CC        ?= cc
# The exec stage is C, static and stripped (launcher/sandbox/execstage);
# internal/testenv builds it with the same flags.
EXECSTAGE_CFLAGS := -std=gnu11 -O2 -Wall -Wextra -Werror -static -s
PIPELINE  := bin/mcpwarden-pipeline
LOADGEN   := bin/mcpwarden-loadgen
PKGS      := ./...
VERSION   ?= $(shell git -c safe.directory='$(CURDIR)' describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
TESTFLAGS ?=
# The tests need tools from sbin (mkfs.ext4, mkfs.btrfs, useradd, runuser,
# bpftool): a runner whose PATH lacks those directories (a service manager's
# or su's) gets them appended. Without them TestFenceFilesystemIoctls failed
# under CI ("mkfs.btrfs is not installed").
export PATH := $(PATH):/usr/local/sbin:/usr/sbin:/sbin
# A runner without HOME (a service manager's environment, env -i): go has
# no build cache then (GOCACHE=off, "build cache is required") and no
# GOPATH for its tools. HOME is then the user's home from the user database
# (scripts/test-env.sh does the same).
ifeq ($(strip $(HOME)),)
export HOME := $(shell getent passwd $$(id -u) | cut -d: -f6)
endif
# A checkout owned by another user than the one running make (a runner
# that checks out as one user and tests as root): git refuses to read it
# ("detected dubious ownership"), which failed generate-check's git diff.
# This checkout is trusted for this make's commands only (the environment
# form of git -c, which git honours for safe.directory), not in any
# git configuration file.
export GIT_CONFIG_COUNT := 1
export GIT_CONFIG_KEY_0 := safe.directory
export GIT_CONFIG_VALUE_0 := $(CURDIR)
# Each package's tests may take a while on 2 cores with real services.
TEST_TIMEOUT ?= 30m

.PHONY: all build check-machine test test-go test-clickhouse-legacy deploy-check deps lint bench bench-fleet generate generate-check demo clean

all: build

# mcpwarden is static (no cgo): the dynamic loader and libc's start-up cost
# each launch about 0.5 ms (docs/benchmarks-launcher.md); a user or group
# only the host's name services know is looked up with getent.
# The fence helper is static (no cgo) and stripped: it starts for every run,
# and `mcpwarden run` finds it next to bin/mcpwarden, with its exec stage
# mcpwarden-exec (C) next to it. mcpwarden-pipeline holds
# the daemon, collect, query, events and why commands (NATS server,
# ClickHouse, eBPF), which `mcpwarden COMMAND` execs from next to it.
# mcpwarden-loadgen simulates a fleet of hosts (collector/loadgen).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mcpwarden
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(PIPELINE) ./cmd/mcpwarden-pipeline
	$(GO) build -trimpath -o $(LOADGEN) ./cmd/mcpwarden-loadgen
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(FENCE) ./cmd/mcpwarden-fence
	@command -v $(CC) >/dev/null || { echo 'make build: the exec stage (launcher/sandbox/execstage) is C: install a C compiler and the static C library (Debian/Ubuntu: apt-get install gcc libc6-dev; make deps does it), or name one with CC=' >&2; exit 1; }
	$(CC) $(EXECSTAGE_CFLAGS) -o $(EXECSTAGE) launcher/sandbox/execstage/stage.c launcher/sandbox/execstage/handover.c launcher/sandbox/execstage/init.c

# deps installs (idempotently) what the tests need: Debian packages, the
# pinned MCP servers from npm, Go tools.
deps:
	scripts/test-env.sh install

# check-machine fails before anything is installed or built when the
# machine lacks what the tests need (docs/pipeline.md, "What the CI machine
# must have"), naming each thing and how to fix it.
check-machine:
	@scripts/test-env.sh check

test: check-machine deps build
	@scripts/test-env.sh up
	@rc=0; $(MAKE) --no-print-directory lint deploy-check generate-check test-go test-clickhouse-legacy || rc=$$?; \
		scripts/test-env.sh down; exit $$rc

# test-go runs every test, race detector on, against a current ClickHouse
# release: chDB's ClickHouse 26.7 (deploy/clickhouse-current), served on the
# native protocol by chdb-listen; every test fails unless the server really
# reports 26.x, and private servers of fault tests are chdb-listen too.
# Tests of clickhouse-server's own configuration (deploy/clickhouse users.d)
# and of a replicated cluster (ZooKeeper, interserver replication, distributed
# DDL) need clickhouse-server, which only 18.16 is here: they start private
# 18.16 servers (collector/internal/chtest). A crash of the 26.7
# engine is reported with its fatal log (scripts/test-env.sh check-current)
# and fails the run: there is no second try.
CLICKHOUSE_CURRENT_ADDR := 127.0.0.1:19000
CLICKHOUSE_LEGACY_ADDR  := 127.0.0.1:9000
CLICKHOUSE_PKGS := ./collector ./collector/loadgen ./collector/query ./collector/store
# The tests run under umask 022 whatever the caller's: tests make
# directories and copy binaries for another user (nobody, a run's own uid)
# with os.Mkdir(0755)-style modes, which a umask of 077 turns into 0700
# (TestNSWithoutUserNamespaces: "the fence helper ... is missing
# (permission denied)").
test-go:
	umask 022; MCPWARDEN_BIN=$(CURDIR)/$(BIN) MCPWARDEN_CLICKHOUSE_ADDR=$(CLICKHOUSE_CURRENT_ADDR) \
		MCPWARDEN_CLICKHOUSE_EXPECT_VERSION=26. \
		MCPWARDEN_CLICKHOUSE_LISTEN_BIN=$(CURDIR)/build/clickhouse-current/chdb-listen \
		scripts/test-env.sh check-current $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS)

# test-clickhouse-legacy runs the ClickHouse packages again against Debian's
# ClickHouse 18.16 (the legacy table layout and client-side parameter
# binding, store.Layout); the tests that start their own clickhouse-server
# ran in test-go already, and so did the NATS cluster failover tests, whose
# subject is the cluster (their inserts take the same path as every other
# collector test here).
CLICKHOUSE_SERVER_TESTS := ^(TestDeployClickHouseUsers|TestClickHouseCluster.*|TestNATSClusterNodeKilledMidStream|TestDaemonBinaryIntoNATSClusterLeaderKilled|TestDeployNATSCluster)$$
test-clickhouse-legacy:
	umask 022; MCPWARDEN_BIN=$(CURDIR)/$(BIN) MCPWARDEN_CLICKHOUSE_ADDR=$(CLICKHOUSE_LEGACY_ADDR) \
		MCPWARDEN_CLICKHOUSE_EXPECT_VERSION=18. \
		$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '$(CLICKHOUSE_SERVER_TESTS)' $(CLICKHOUSE_PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$$(scripts/test-env.sh gobin)/staticcheck $(PKGS)

# bench runs every Go benchmark; docs/benchmarks.md summarises the figures
# against the targets and names the exact command behind each.
bench: deps build
	@scripts/test-env.sh up
	@rc=0; MCPWARDEN_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 60m $(PKGS) || rc=$$?; \
		scripts/test-env.sh down; exit $$rc

# bench-fleet runs the fleet benchmarks (collector/loadgen, docs/fleet.md)
# on ClickHouse 26.7 (chdb-listen): simulated hosts through a 3-node NATS
# JetStream cluster (stream R3) into collector processes of the real binary,
# then every produced event checked stored once. The default is short
# (100 hosts for 20 s, one collector); the issue's runs, e.g.:
#   make bench-fleet FLEET_HOSTS=1000 FLEET_DURATION=10m FLEET_RATE=20000
#   make bench-fleet FLEET_HOSTS=1000 FLEET_DURATION=60s FLEET_COLLECTORS=1,2,4
#   make bench-fleet FLEET_HOSTS=1000 FLEET_DURATION=60s FLEET_SHARDS=2   (private 2x2 18.16 cluster)
#   make bench-fleet FLEET_BENCH=BenchmarkFleetQueries FLEET_QUERY_EVENTS=100000000
# It starts the test services (scripts/test-env.sh up) and leaves them up.
FLEET_BENCH        ?= BenchmarkFleet
FLEET_HOSTS        ?= 100
FLEET_DURATION     ?= 20s
FLEET_RATE         ?= 0
FLEET_COLLECTORS   ?= 1
FLEET_NATS         ?= cluster
FLEET_SHARDS       ?= 0
FLEET_MAX_IN_FLIGHT ?= 16
FLEET_QUERY_EVENTS ?= 10000000
FLEET_QUERY_RUNS   ?= 20
bench-fleet: deps build
	@scripts/test-env.sh up
	MCPWARDEN_BIN=$(CURDIR)/$(BIN) MCPWARDEN_CLICKHOUSE_ADDR=$(CLICKHOUSE_CURRENT_ADDR) \
		MCPWARDEN_FLEET_HOSTS=$(FLEET_HOSTS) MCPWARDEN_FLEET_DURATION=$(FLEET_DURATION) MCPWARDEN_FLEET_RATE=$(FLEET_RATE) \
		MCPWARDEN_FLEET_COLLECTORS=$(FLEET_COLLECTORS) MCPWARDEN_FLEET_NATS=$(FLEET_NATS) MCPWARDEN_FLEET_SHARDS=$(FLEET_SHARDS) MCPWARDEN_FLEET_MAX_IN_FLIGHT=$(FLEET_MAX_IN_FLIGHT) \
		MCPWARDEN_FLEET_QUERY_EVENTS=$(FLEET_QUERY_EVENTS) \
		$(GO) test -run '^$$' -bench '^$(FLEET_BENCH)$$' -benchtime $(if $(filter BenchmarkFleetQueries,$(FLEET_BENCH)),$(FLEET_QUERY_RUNS),1)x -timeout 90m ./collector/loadgen/

# deploy-check validates deploy/docker-compose.yml, alone and with the
# 3-node NATS cluster of docker-compose.nats-cluster.yml (syntax,
# interpolation, references), with docker-compose, which needs no container engine; the
# configurations it mounts are tested against real servers in ./collector.
deploy-check:
	HOST_WEB_1_PASSWORD=x HOST_WEB_2_PASSWORD=x COLLECTOR_PASSWORD=x ANALYST_PASSWORD=x CLICKHOUSE_COLLECTOR_PASSWORD=x CLICKHOUSE_ANALYST_PASSWORD=x GRAFANA_ADMIN_PASSWORD=x \
		sh -c 'docker-compose -f deploy/docker-compose.yml config -q && docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.nats-cluster.yml config -q'

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
