# Corvo — see README.md. `make run` and `make test` are the two commands a
# new user needs; everything they need is installed by this file and go.mod.

GO        ?= go
BIN       := bin/corvo
DATA_DIR  ?= ./corvo-data
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: all build run test test-short lint fmt vet staticcheck fuzz bench tools clean help

all: build ## Build the corvo binary

build: ## Build bin/corvo
	$(GO) build -o $(BIN) ./cmd/corvo

run: build ## Build and start a single-node server on :8080 (data in ./corvo-data)
	./$(BIN) server --data-dir $(DATA_DIR)

test: tools lint ## Run every test (race detector on), after go vet, staticcheck and gofmt
	$(GO) test -race -count=1 -timeout 30m ./...
	cd sdk/go && $(GO) test -race -count=1 -timeout 10m ./...
	cd deploy && $(GO) test -race -count=1 -timeout 10m ./...

test-short: ## Unit tests only, no race detector
	$(GO) test -short -count=1 ./...

vet: ## go vet
	$(GO) vet ./...
	cd sdk/go && $(GO) vet ./...
	cd deploy && $(GO) vet ./...

fmt: ## gofmt every file
	gofmt -w $$(git ls-files '*.go')

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

staticcheck: $(STATICCHECK) ## staticcheck
	$(STATICCHECK) ./...
	cd sdk/go && $(STATICCHECK) ./...
	cd deploy && $(STATICCHECK) ./...

lint: vet staticcheck ## go vet + staticcheck + gofmt check
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

tools: ## Install what the end-to-end tests drive the server with (curl, jq)
	@scripts/ensure-tools.sh

fuzz: ## Long fuzz runs of every parser (FUZZTIME=1m each)
	$(GO) test ./gateway -run '^$$' -fuzz FuzzDecodeEnqueue -fuzztime $${FUZZTIME:-1m}
	$(GO) test ./gateway -run '^$$' -fuzz FuzzDecodeFetch -fuzztime $${FUZZTIME:-1m}
	$(GO) test ./statemachine -run '^$$' -fuzz FuzzDecodeEntry -fuzztime $${FUZZTIME:-1m}
	$(GO) test ./router -run '^$$' -fuzz FuzzParseJobID -fuzztime $${FUZZTIME:-1m}
	$(GO) test ./gateway/events -run '^$$' -fuzz FuzzDecodeCursor -fuzztime $${FUZZTIME:-1m}

bench: build ## Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem ./statemachine ./gateway

clean: ## Remove build output (not the data dir)
	rm -rf bin

help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
