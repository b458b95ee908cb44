GO ?= go
PROTO_FILES := $(sort $(shell find proto -name '*.proto'))

.PHONY: all build test test-short proto proto-check deps bench fuzz vet fmt-check staticcheck

STATICCHECK_VERSION := v0.8.2
# Each fuzz target runs this long in `make fuzz`.
FUZZTIME ?= 20s

all: build

build:
	$(GO) build ./...

# The whole suite: installs what the tests need, checks generated code, vets, runs
# every test with the race detector, and runs each quick benchmark once (so they
# keep working; the numbers come from `make bench`).
test: deps proto-check fmt-check vet staticcheck
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -race -count=1 -tags seededbugs ./cmd/cohortd/
	$(GO) test -short -run '^$$' -bench . -benchtime 1x -timeout 10m ./coordinator/ ./actors/ ./raftfsm/ ./assignor/ ./kafka/

test-short:
	$(GO) test -short -count=1 ./...

vet:
	$(GO) vet ./...
	$(GO) vet -tags seededbugs ./internal/seededbug/ ./cmd/cohortd/

# Fails when a file is not gofmt-formatted (gofmt -l lists it).
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:" >&2; echo "$$out" >&2; exit 1; fi

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Test prerequisites. Debian packages are installed only when missing.
deps:
	@command -v protoc >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null)
	@command -v promtool >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null)
	$(GO) mod download

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

# Runs every fuzz target for FUZZTIME (go test -fuzz takes one target per run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzGroup$$' -fuzztime $(FUZZTIME) ./coordinator/
	$(GO) test -run '^$$' -fuzz '^FuzzApply$$' -fuzztime $(FUZZTIME) ./raftfsm/
	$(GO) test -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(FUZZTIME) ./raftfsm/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEnvelope$$' -fuzztime $(FUZZTIME) ./raftfsm/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./assignor/
	$(GO) test -run '^$$' -fuzz '^FuzzConn$$' -fuzztime $(FUZZTIME) ./kafka/
	$(GO) test -run '^$$' -fuzz '^FuzzSASL$$' -fuzztime $(FUZZTIME) ./kafka/
	$(GO) test -run '^$$' -fuzz '^FuzzTLSAccept$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10x ./kafka/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeHeader$$' -fuzztime $(FUZZTIME) ./raftfsm/raftmux/
