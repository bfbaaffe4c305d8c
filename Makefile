# gpubill — the two commands: `make run` and `make test`. See README.md.
SHELL := /bin/bash
SERVICES := metering pricing ledger tax payout settlement gpubill
# The chaos tests' nats-server processes: the server version the rest of the
# suite embeds (pkg/go.mod), not whatever the OS packages.
NATS_SERVER := github.com/nats-io/nats-server/v2
MODULES  := pkg migrations proto $(addprefix services/,$(SERVICES))
PKGS     := $(addprefix ./,$(addsuffix /...,$(MODULES)))
TEST_TIMEOUT ?= 18m
GO ?= go

include Makefile.generate

.PHONY: all build run test test-race bench vet fmt clean tidy promtool-check lint lint-tools helm-tools helm-check

all: build

# What `--version` and `gpubill version` print (pkg/cmdline). The commit also
# comes from go's VCS stamp when there is one (not in a git worktree).
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_TIME ?= $(shell git log -1 --format=%cI 2>/dev/null)
CMDLINE     := github.com/gpubill/gpubill/pkg/cmdline
LDFLAGS     := -X $(CMDLINE).version=$(VERSION) -X $(CMDLINE).commit=$(COMMIT) -X $(CMDLINE).commitTime=$(COMMIT_TIME)

## build: every binary into bin/ (bin/gpubill, bin/ledger, …) plus the Temporal dev server.
build: bin/temporal
	@mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ $(foreach s,$(SERVICES),./services/$(s)/cmd/$(s))
	$(GO) build -o bin/ $(NATS_SERVER)

## bin/temporal: the Temporal CLI plus gpubill's tuned dev server
## (`temporal gpubill-dev-server`), the Temporal server on PostgreSQL
## (`temporal gpubill-server --config`) and Temporal's SQL schema tool
## (`temporal gpubill-sql-tool`), built in its own module so the Temporal
## server's dependencies never enter the workspace. ~5–8 min the first time.
bin/temporal: tools/temporal/go.mod tools/temporal/go.sum $(wildcard tools/temporal/*.go) $(filter-out %_test.go,$(wildcard tools/temporal/*/*.go))
	@mkdir -p bin
	@echo "building the Temporal dev server (first time: several minutes)…"
	cd tools/temporal && GOWORK=off $(GO) build -trimpath -ldflags=-checklinkname=0 -o ../../bin/temporal .
	@touch bin/temporal

## run: gpubill dev with embedded NATS + Temporal and the simulated marketplace.
run: build
	GPUBILL_SIMULATE=$${GPUBILL_SIMULATE:-true} ./bin/gpubill dev

## test: every test of every module, against real PostgreSQL and NATS. The
## chaos test runs the service binaries `build` just refreshed.
test: build
	$(GO) vet $(PKGS)
	GPUBILL_CHAOS_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	cd tools/temporal && GOWORK=off $(GO) test -count=1 -ldflags=-checklinkname=0 ./stmtcache/

## test-race: the concurrent paths under the race detector — the ledger's group
## commit and hot accounts, the outbox relay and inbox, metering's concurrent
## ingest, settlement's page (its sliding window of provider settlements),
## the group queue and the shared batches of settlement's and tax's statements
## (with the stores' callers whose context ends while their batch waits).
## The settlement tests' time-skipping environments use a 1 min deadlock
## detector (newTestEnv): the SDK's 1 s one trips under -race on a busy machine.
test-race:
	$(GO) test -race -count=1 -timeout 10m ./pkg/outbox/... ./services/metering/internal/app/...
	$(GO) test -race -count=1 -timeout 10m -run 'TestGroupCommitIsolatesFailures|TestConcurrentHotAccounts|TestChargesConsumerFromJetStream' ./services/ledger/
	$(GO) test -race -count=1 -timeout 10m -run 'TestCycleSettlesWithinWindow|TestCycleTimerThenCloseSettlesEveryProvider|TestHeldProviderStaysPending' ./services/settlement/
	$(GO) test -race -count=1 -timeout 10m ./pkg/group/...
	$(GO) test -race -count=1 -timeout 10m -run 'Batches' ./pkg/pg/
	$(GO) test -race -count=1 -timeout 10m -run 'TestWithholdingKeyTakenConcurrentlyAnswersTheOriginal' ./services/tax/
	$(GO) test -race -count=1 -timeout 10m -run 'WithAnEndedContext' ./services/settlement/internal/adapters/postgres/ ./services/tax/internal/adapters/postgres/

## bench: benchmarks as JSON lines; BENCH_FILTER=regex selects figures. One package at a
## time (-p 1): figures measured side by side on 2 cores would measure each other.
bench: bin/temporal
	@set -o pipefail; GPUBILL_BENCH=1 $(GO) test -p 1 -count=1 -timeout 60m -run 'TestBench' -v $(PKGS) 2>&1 \
		| tee .bench.log | grep -E '^\{"bench"' ; \
		status=$${PIPESTATUS[0]}; if [ $$status -ne 0 ]; then grep -E -- '--- FAIL|FAIL|panic' .bench.log; exit $$status; fi

## promtool-check: the alert rules parse and their unit tests pass (Debian: apt-get install prometheus).
PROMTOOL ?= promtool
promtool-check:
	@command -v $(PROMTOOL) >/dev/null || { echo "$(PROMTOOL) not found: apt-get install -y --no-install-recommends prometheus" >&2; exit 1; }
	cd deploy/prometheus && $(PROMTOOL) check rules alerts.yml && $(PROMTOOL) test rules alerts_test.yml

## helm-check: helm (v3, built from tools/helm: its own module outside go.work,
## like tools/golangci) lints deploy/helm/gpubill and renders it, and
## TestHelmChartRendersEveryService checks the manifests (each service a
## Deployment with probes and resources, a PodDisruptionBudget, a Service; the
## signing key from a Secret, required). The official NATS and Temporal charts
## are dependencies off by default; nothing is fetched.
HELM := tools/helm/bin/helm
helm-tools: $(HELM)
$(HELM): tools/helm/go.mod tools/helm/go.sum
	cd tools/helm && GOWORK=off $(GO) build -trimpath -o bin/ helm.sh/helm/v3/cmd/helm
	@touch $(HELM)
helm-check: $(HELM)
	$(HELM) lint deploy/helm/gpubill --set authSecret.existingSecret=gpubill-auth --set webhookKey.existingSecret=gpubill-webhook
	HELM=$(CURDIR)/$(HELM) $(GO) test -count=1 -run 'TestHelmChartRendersEveryService' ./services/gpubill/internal/deploycheck/

vet:
	$(GO) vet $(PKGS)

## lint: golangci-lint v2 (.golangci.yml: gofmt/goimports, govet, staticcheck,
## errcheck, depguard's layer rules), built from tools/golangci (its own
## module, outside go.work) into tools/golangci/bin. Several minutes to build
## the first time. .ci/run runs it after generate-check; it must stay at zero
## findings.
LINT := tools/golangci/bin/golangci-lint
lint-tools: $(LINT)
$(LINT): tools/golangci/go.mod tools/golangci/go.sum
	cd tools/golangci && GOWORK=off $(GO) build -trimpath -o bin/ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@touch $(LINT)
lint: $(LINT)
	$(LINT) run $(PKGS)

fmt:
	gofmt -w $(MODULES)

tidy:
	for m in $(MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy) || exit 1; done

clean:
	rm -rf bin/gpubill $(addprefix bin/,$(SERVICES)) .bench.log
