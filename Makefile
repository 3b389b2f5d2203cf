# Corvo — see README.md. `make run` and `make test` are the two commands a
# new user needs; everything they need is installed by this file and go.mod.

GO        ?= go
BIN       := bin/corvo
DATA_DIR  ?= ./corvo-data
# make run listens on loopback only; BIND=:8080 serves every interface.
BIND      ?= 127.0.0.1:8080
RAFT_BIND ?= 127.0.0.1:9400
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: all build run test test-short lint tidy-check fmt vet staticcheck fuzz bench tools clean help ui ui-deps ui-test ui-check ui-e2e ui-dev sdk-ts-deps sdk-ts-test sdk-ts-pack sdk-py-test ui-screenshots

all: build ## Build the corvo binary

build: ## Build bin/corvo
	$(GO) build -o $(BIN) ./cmd/corvo

run: build ## Build and start a single-node server on 127.0.0.1:8080 (BIND, RAFT_BIND to change; data in ./corvo-data)
	./$(BIN) server --data-dir $(DATA_DIR) --bind $(BIND) --raft-bind $(RAFT_BIND)

test: tools lint ## Run every test (race detector on), after go vet, staticcheck and gofmt; then the UI's and the TypeScript and Python SDKs'
	$(GO) test -race -count=1 -timeout 30m ./...
	cd sdk/go && $(GO) test -race -count=1 -timeout 10m ./...
	cd deploy && $(GO) test -race -count=1 -timeout 10m ./...
	$(MAKE) ui-test ui-check ui-e2e sdk-ts-test sdk-py-test

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

lint: vet staticcheck tidy-check ## go vet + staticcheck + gofmt check + go mod tidy check
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

tidy-check: ## Fail when go.mod/go.sum of a module (root, sdk/go, deploy) differ from what go mod tidy writes
	@for m in . sdk/go deploy; do \
	  (cd $$m && $(GO) mod tidy -diff) || { echo "$$m: go.mod/go.sum are not tidy: run 'go mod tidy' there"; exit 1; }; \
	done

tools: ## Install what the end-to-end tests drive the server with (curl, jq)
	@scripts/ensure-tools.sh

fuzz: ## Fuzz every Fuzz target of every module, FUZZTIME each (default 1m); scripts/fuzz-all.sh --list shows them
	GO=$(GO) scripts/fuzz-all.sh

bench: build ## Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem ./statemachine ./gateway

# The web UI (ui/): its built assets in ui/dist are committed and embedded
# in the binary, so build and run need no Node. These targets need Node 20+
# and npm; ui-e2e also needs chromium (installed with apt-get when missing).
UI_STAMP := ui/node_modules/.package-lock.json

$(UI_STAMP): ui/package.json ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund
	@touch $@

ui-deps: $(UI_STAMP) ## Install the UI's pinned npm dependencies (npm ci)

ui: ui-deps ## Rebuild ui/dist from the UI sources (commit the result)
	cd ui && npm run build

ui-test: ui-deps ## UI unit and component tests (Vitest)
	cd ui && npx vitest run

ui-check: ui-deps ## Fail when the committed ui/dist differs from a fresh build of the sources
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  (cd ui && CORVO_UI_OUT="$$tmp/dist" npm run build >"$$tmp/build.log" 2>&1 || (cat "$$tmp/build.log"; exit 1)) && \
	  if diff -r ui/dist "$$tmp/dist" >/dev/null; then echo "ui/dist matches its sources"; \
	  else diff -r ui/dist "$$tmp/dist" | head -20; echo "ui/dist is stale: run 'make ui' and commit ui/dist"; exit 1; fi

# ui-e2e writes its screenshots under ui/test-results/ so a test run leaves
# the checkout as it was; ui-screenshots writes the committed ones.
SHOTS ?= test-results/screenshots
ui-e2e: build ui-deps ## Browser tests of the UI (headless chromium) against a real server; screenshots in ui/test-results/screenshots/
	$(GO) build -o bin/oidc-issuer ./internal/oidctest/cmd/oidc-issuer
	rm -rf ui/$(SHOTS)/*.png
	@CORVO_CHROMIUM=$$(scripts/ensure-chromium.sh) && cd ui && CORVO_CHROMIUM="$$CORVO_CHROMIUM" CORVO_SCREENSHOTS=$(SHOTS) npx playwright test

ui-screenshots: ## Run the browser tests and write every screen's screenshot to ui/screenshots/ (commit them after a UI change)
	$(MAKE) ui-e2e SHOTS=screenshots

ui-dev: ui-deps ## Vite dev server on :5173 with hot reload, proxying the API to CORVO_URL (default http://127.0.0.1:8080)
	cd ui && npm run dev

# The TypeScript SDK (sdk/typescript): Node 20+ and npm, like the UI. Its
# tests (the conformance suite among them) run against bin/corvo.
SDK_TS_STAMP := sdk/typescript/node_modules/.package-lock.json

$(SDK_TS_STAMP): sdk/typescript/package.json sdk/typescript/package-lock.json
	cd sdk/typescript && npm ci --no-audit --no-fund
	@touch $@

sdk-ts-deps: $(SDK_TS_STAMP) ## Install the TypeScript SDK's pinned dev dependencies (npm ci)

sdk-ts-pack: sdk-ts-deps ## Build the TypeScript SDK's npm package: bin/corvohq-corvo-<version>.tgz, for `npm install <that file>` in a project
	@mkdir -p bin
	cd sdk/typescript && npm pack --pack-destination $(CURDIR)/bin

sdk-ts-test: build sdk-ts-deps ## The TypeScript SDK's tests: unit, conformance suite, npm pack, SIGTERM drain (against bin/corvo)
	cd sdk/typescript && CORVO_BIN=$(CURDIR)/$(BIN) npm test

# The Python SDK (sdk/python): the standard library's unittest and the
# system's python3 (3.9+), nothing installed. Its tests (the conformance
# suite among them) run against bin/corvo.
PYTHON ?= python3

sdk-py-test: build ## The Python SDK's tests: unit, conformance suite, README quick starts, examples/worker-py and its SIGTERM drain (against bin/corvo)
	cd sdk/python && CORVO_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m unittest discover -s tests -v

clean: ## Remove build output (not the data dir)
	rm -rf bin

help: ## List targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'
