GO ?= go
PROTO_FILES := $(sort $(shell find proto -name '*.proto'))

.PHONY: all build test test-race test-short proto proto-check tidy-check deps bench fuzz fuzz-list vet fmt-check staticcheck

STATICCHECK_VERSION := v0.8.2
# The nested modules that hold the test harnesses and their heavy dependencies
# (Kafka clients, kfake, porcupine), so that cohort's own go.mod does not
# require them. `go test ./...` at the root does not enter them: every target
# below runs each module (`go -C <module>`).
TEST_MODULES := kafka/interop cluster-test
MODULES := . $(TEST_MODULES)
# How many test packages `make test` runs at once, across the modules (go
# test's own default -p is the number of CPUs).
TEST_PARALLEL ?= $(shell nproc 2>/dev/null || echo 2)
# Each fuzz target runs this long in `make fuzz`, which also runs the member
# and coordinator simulation over SIM_SEEDS more seeds per protocol.
FUZZTIME ?= 20s
SIM_SEEDS ?= 20000

all: build

build:
	$(GO) build ./...

# The whole suite: installs what the tests need, checks generated code, vets, runs
# every test of every module with the race detector, and runs each quick
# benchmark once (so they keep working; the numbers come from `make bench`).
test: deps tidy-check proto-check fmt-check vet staticcheck test-race
	$(GO) test -race -count=1 -tags seededbugs ./cmd/cohortd/
	$(GO) test -short -run '^$$' -bench . -benchtime 1x -timeout 10m ./coordinator/ ./actors/ ./raftfsm/ ./assignor/ ./kafka/
	$(GO) -C cluster-test test -short -run '^$$' -bench . -benchtime 1x -timeout 10m ./kafkabench/

# Every test package of every module with the race detector, TEST_PARALLEL at
# a time: one `go test` per package, so that packages of different modules
# run side by side as one module's do under `go test ./...` (the suite is
# mostly waiting, on timeouts and child processes). The nested modules come
# first: their tests are the longest.
test-race:
	@pkgs=$$(for m in $(TEST_MODULES) .; do $(GO) -C $$m list -f "{{if or .TestGoFiles .XTestGoFiles}}$$m {{.ImportPath}}{{end}}" ./... || exit 1; done) || exit 1; \
	echo "$$pkgs" | xargs -P $(TEST_PARALLEL) -L 1 sh -c 'echo "$(GO) -C $$0 test -race -count=1 -timeout 30m $$1"; $(GO) -C "$$0" test -race -count=1 -timeout 30m "$$1"'

test-short:
	$(foreach m,$(MODULES),$(GO) -C $(m) test -short -count=1 ./...$(newline))

# Fails when a module's go.mod or go.sum is not what `go mod tidy` makes of them.
tidy-check:
	$(foreach m,$(MODULES),$(GO) -C $(m) mod tidy -diff$(newline))

vet:
	$(foreach m,$(MODULES),$(GO) -C $(m) vet ./...$(newline))
	$(GO) vet -tags seededbugs ./internal/seededbug/ ./cmd/cohortd/

# Fails when a file is not gofmt-formatted (gofmt -l lists it).
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:" >&2; echo "$$out" >&2; exit 1; fi

staticcheck:
	$(foreach m,$(MODULES),$(GO) -C $(m) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...$(newline))

# Test prerequisites. Debian packages are installed only when missing.
deps:
	@command -v protoc >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null)
	@command -v promtool >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null)
	$(foreach m,$(MODULES),$(GO) -C $(m) mod download$(newline))
	$(GO) -C kafka/interop run ./clients/install

# Regenerate the protobuf code (protoc from Debian, protoc-gen-go pinned as a tool in go.mod).
proto:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	protoc --plugin=protoc-gen-go=bin/protoc-gen-go -I proto --go_out=proto --go_opt=paths=source_relative $(PROTO_FILES)

# Fails when the committed generated code differs from what `make proto`
# produces, or when it produces a file that is not committed.
proto-check: proto
	@git diff --exit-code -- proto || (echo "generated protobuf code is stale: run 'make proto' and commit" >&2; exit 1)
	@new=$$(git ls-files --others --exclude-standard -- proto); if [ -n "$$new" ]; then echo "generated protobuf code is not committed:" >&2; echo "$$new" >&2; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./coordinator/ ./actors/ ./raftfsm/

# Every fuzz target in the tree as <package dir>/<FuzzName>, read from the tests
# themselves, so a new target is fuzzed without being listed here.
FUZZ_TARGETS := $(sort $(shell grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed -E 's|^\./(.*)/[^/]*:func |\1/|'))
# The module a folder lies in (one of TEST_MODULES, else the root, .), and the
# folder's path inside that module: a target in a nested module runs there.
module_of = $(firstword $(foreach m,$(TEST_MODULES),$(if $(filter $(m)/%,$(1)),$(m))) .)
in_module = $(patsubst $(call module_of,$(1))/%,%,$(1))
# Extra flags for one target, by name.
FUZZFLAGS_FuzzTLSAccept := -fuzzminimizetime 10x
FUZZFLAGS_FuzzConsumerGroupHeartbeat := -fuzzminimizetime 10x
FUZZFLAGS_FuzzConsumerGroupDescribe := -fuzzminimizetime 10x

define newline


endef

# Runs every fuzz target for FUZZTIME (go test -fuzz takes one target per run).
fuzz:
	@test -n "$(FUZZ_TARGETS)" || (echo "no fuzz targets found" >&2; exit 1)
	$(foreach t,$(FUZZ_TARGETS),$(GO) -C $(call module_of,$(dir $(t))) test -run '^$$' -fuzz '^$(notdir $(t))$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS_$(notdir $(t))) ./$(call in_module,$(dir $(t)))$(newline))
	COHORT_SIM_SEEDS=$(SIM_SEEDS) COHORT_SIM_FIRST=1500 $(GO) test -count=1 -run '^TestSimulatedOwnership$$' -timeout 60m ./membership/

# Lists the fuzz targets `make fuzz` runs.
fuzz-list:
	@$(foreach t,$(FUZZ_TARGETS),echo $(t);)
