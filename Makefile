# QueueBox. `make help` lists the targets.
GO       ?= go
BIN      := bin/queuebox
# The release tag, or dev for a build that is not one; the commit, -dirty
# when the tree has changes.
VERSION  ?= $(shell git describe --tags --exact-match 2>/dev/null || echo dev)
COMMIT   ?= $(shell c=$$(git rev-parse --short=7 HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)
LDFLAGS  := -X github.com/queuebox/queuebox/bootstrap.Version=$(VERSION) -X github.com/queuebox/queuebox/bootstrap.Commit=$(COMMIT)
# The suite runs with the race detector; TESTFLAGS adds to it.
TESTFLAGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: help build image run test test-short test-faults fuzz lint bench microbench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/queuebox
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/queuebox

# The container image: FROM scratch, nothing pulled (scripts/build-image.sh;
# it installs podman when it is missing). IMAGE names it.
IMAGE ?= localhost/queuebox:$(VERSION)
image: ## build the container image (IMAGE, default localhost/queuebox:VERSION) with podman
	VERSION=$(VERSION) COMMIT=$(COMMIT) IMAGE=$(IMAGE) scripts/build-image.sh

run: build ## start the local default: throwaway PostgreSQL, relay, receiver, sample traffic
	@scripts/install-postgres.sh
	$(BIN) dev

# The fault suite runs last and alone: its replicas hold 3-second leases,
# and on two cores shared with the other packages' tests a starved replica
# could miss a renewal, a duplicate that no injected fault explains.
# Between them, every fuzz test hunts for TEST_FUZZTIME (its seed corpus and
# kept crashers already ran with the package's tests); `make fuzz` hunts longer.
TEST_FUZZTIME ?= 5s
test: lint ## install and start what the tests need, then run every test
	scripts/test.sh -race -count=1 -timeout 15m $(TESTFLAGS) $$($(GO) list ./... | grep -v '/faults$$')
	FUZZTIME=$(TEST_FUZZTIME) scripts/fuzz.sh
	scripts/test.sh -race -count=1 -timeout 15m $(TESTFLAGS) ./faults

test-faults: ## the whole fault-injection suite (replicas, PostgreSQL, brokers, network faults); its table in faults-report.md
	QUEUEBOX_FAULTS=full QUEUEBOX_FAULTS_REPORT=$(CURDIR)/faults-report.md scripts/test.sh -count=1 -timeout 40m -run 'TestFaults|TestVerdict' -v $(TESTFLAGS) ./faults/...

# FUZZTIME is how long each fuzz test runs: `make fuzz FUZZTIME=10m` hunts longer.
FUZZTIME ?= 10s
fuzz: ## every fuzz test for FUZZTIME each (default 10s); crashers are kept in testdata/fuzz
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

test-short: ## the tests without the slow ones, no race detector
	scripts/test.sh -short $(TESTFLAGS) ./...

lint: ## gofmt, go vet and staticcheck
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench: build ## queuebox bench: every scenario on a durable throwaway cluster, results in bench.json
	@scripts/install-postgres.sh
	$(BIN) bench --json bench.json

microbench: ## Go micro-benchmarks of the hot paths, with allocations
	scripts/test.sh -run '^$$' -bench . -benchmem -benchtime 1s -timeout 30m ./routing/... ./actors/... ./sinks/...

clean: ## remove build output
	rm -rf bin
