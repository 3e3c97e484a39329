# Dolphin — every check is one target. `make help` lists them.
SHELL := /usr/bin/env bash -o pipefail
GO ?= go
CONTROLLER_GEN := $(GO) tool controller-gen
# Control-plane binaries (kube-apiserver, etcd, kubectl …) built from Go modules, cached by version.
KUBEBUILDER_ASSETS ?= $(shell hack/control-plane.sh --print)
# versitygw, the real S3 server of the object-store tests, built from Go modules, cached by version.
VERSITYGW ?= $(shell hack/versitygw.sh --print)
# The real node's binaries (containerd, kubelet, kube-proxy, CoreDNS), built by hack/node.sh, cached by version.
NODE_BIN ?= $(shell hack/node.sh --print)
PROMTOOL ?= $(shell hack/promtool.sh --print)
# MOCO's controller, the peer of the footprint bench, built from Go modules (hack/moco), cached by version.
MOCO ?= $(shell hack/moco.sh --print)
# Prometheus' mysqld_exporter, the peer of the instance-metrics bench, built from its module, cached by version.
MYSQLD_EXPORTER ?= $(shell hack/mysqld-exporter.sh --print)

.PHONY: help
help: ## List targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Regenerate deepcopy and conversion code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool conversion-gen --skip-unsafe --go-header-file hack/boilerplate.go.txt --output-file zz_generated.conversion.go ./api/v1alpha1

.PHONY: manifests
manifests: ## Regenerate the CRD and RBAC manifests under config/, and the charts' CRD templates.
	$(CONTROLLER_GEN) crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(GO) run ./hack/crdconversion config/crd/bases/mysql.dolphin.dev_mysqlclusters.yaml
	$(CONTROLLER_GEN) rbac:roleName=dolphin-operator paths=./internal/... output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/charts

.PHONY: verify-generated
verify-generated: generate manifests ## Fail when generated files are not committed.
	@git diff --exit-code -- api config charts || { echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { git status --porcelain -- api config charts; echo "untracked generated files: commit them"; exit 1; }

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet + gofmt check.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run make fmt"; exit 1; }
	$(GO) vet ./...

.PHONY: lint
lint: ## golangci-lint (pinned, built once by hack/golangci-lint.sh) with .golangci.yml: errorlint, dupl, gocyclo, unparam, revive's exported rule.
	$$(hack/golangci-lint.sh) run ./...

.PHONY: build
build: ## Build bin/dolphin (every role), bin/dolphin-operator (the operator alone, what a real install runs) and bin/dolphin-pod (the in-pod commands alone, the image's /dolphin).
	$(GO) build -o bin/dolphin ./cmd/dolphin
	$(GO) build -o bin/dolphin-operator ./cmd/dolphin-operator
	$(GO) build -o bin/dolphin-pod ./cmd/dolphin-pod

# Images built here without Docker (make images), cached by content under the user's cache folder.
CACHE_DIR := $(or $(DOLPHIN_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dolphin)
IMAGES_DIR ?= $(CACHE_DIR)/images
IMAGE_TAG ?= dev
IMAGE_SUITES ?= bookworm,trixie
# The image's times and labels come from the commit, so the same commit gives the same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_LDFLAGS := -s -w -buildid=

.PHONY: node
node: ## Install (Debian: runc, CNI plugins, iptables, mmdebstrap) and build (once, cached) containerd, kubelet, kube-proxy and CoreDNS for the real local node.
	@hack/node.sh

.PHONY: images
images: ## Build Dolphin's image, the pause image and MariaDB images (Debian bookworm 10.11, trixie 11.8) without Docker into IMAGES_DIR (root: mmdebstrap).
	@hack/node.sh >/dev/null
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/image/dolphin ./cmd/dolphin-pod
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/image/dolphin-operator ./cmd/dolphin-operator
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(IMAGE_LDFLAGS)" -o bin/image/pause ./hack/pause
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./hack/images --dir $(IMAGES_DIR) --tag $(IMAGE_TAG) \
	  --suites $(IMAGE_SUITES) --version $(IMAGE_TAG) --revision $$(git rev-parse HEAD 2>/dev/null)

.PHONY: control-plane
control-plane: ## Build (once, cached) kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd.
	hack/control-plane.sh

.PHONY: versitygw
versitygw: ## Build (once, cached) versitygw, the S3 server of the object-store tests.
	hack/versitygw.sh

.PHONY: plugin
plugin: ## Build kubectl-dolphin into bin/ (put it on PATH: kubectl dolphin …).
	$(GO) build -o bin/kubectl-dolphin ./cmd/kubectl-dolphin

.PHONY: plugin-release
plugin-release: ## Build kubectl-dolphin's release archives and krew manifest into dist/ (VERSION=vX.Y.Z).
	$(GO) run ./hack/krew --version $(VERSION) --out dist

.PHONY: promtool
promtool: ## Provide (once, cached) promtool, which checks and unit-tests the alert rules (Debian's package, not installed; else built from Go modules).
	hack/promtool.sh

.PHONY: helm
helm: ## Build (once, cached) the helm command (helm.sh/helm/v4, as go.mod names it), for installing the charts.
	hack/helm.sh

.PHONY: mysqld-exporter
mysqld-exporter: ## Build (once, cached) Prometheus' mysqld_exporter, the version whose collectors the agent links, for bench-instance-metrics.
	hack/mysqld-exporter.sh

.PHONY: moco
moco: ## Build (once, cached) MOCO's controller, the peer measured by bench-footprint.
	hack/moco.sh

.PHONY: mariadb
mariadb: ## Install MariaDB server binaries from Debian (for the real-server tests), if missing.
	hack/install-mariadb.sh

.PHONY: test-unit
test-unit: ## Unit, golden and table tests (no servers).
	$(GO) test -short ./...

.PHONY: test-envtest
# The packages of every tier but the end-to-end one: a tier selects its tests by name across
# all of them (TestEnvtest…: a real API server; TestServer…/…Cluster…: real mariadbd or S3
# servers), so that a new test of a kind runs in its tier wherever it lives.
NON_E2E_PKGS = $$($(GO) list ./... | grep -v /test/e2e)

test-envtest: control-plane mariadb ## Every TestEnvtest… (a real kube-apiserver + etcd built from Go modules; the TestEnvtestServer… ones also run mariadbd).
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) $(GO) test -count=1 -run 'Envtest' $(NON_E2E_PKGS)

.PHONY: test-mariadb
test-mariadb: mariadb versitygw ## Every real-server test (TestServer…, …Cluster…): real mariadbd processes on 127.x.y.z and the S3 server; not the envtest ones.
	DOLPHIN_VERSITYGW=$(VERSITYGW) $(GO) test -count=1 -run 'Server|Cluster' -skip 'Envtest' $(NON_E2E_PKGS)

# TEST_KEEP: where a failed end-to-end test of `make test` leaves every log (operator, node,
# each container), so that a red CI run can be read afterwards on the machine that ran it.
ifndef TEST_KEEP
TEST_KEEP := $(CACHE_DIR)/test-logs/$(shell date +%Y%m%d-%H%M%S)
endif

.PHONY: test
test: mariadb control-plane versitygw node images promtool vet lint ## Everything the README promises: unit, golden, envtest, real-MariaDB, real-S3 and real-node tests, and the CRD gate.
	@echo "make test: $$($(GO) version | cut -d' ' -f3), $$(PATH=$$PATH:/usr/sbin mariadbd --version | grep -oE 'Ver [^ ]+'), control plane $$(basename $(KUBEBUILDER_ASSETS)), node $$(basename $(NODE_BIN)), $$(nproc) CPUs"
	KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) DOLPHIN_VERSITYGW=$(VERSITYGW) DOLPHIN_NODE_BIN=$(NODE_BIN) DOLPHIN_IMAGES=$(IMAGES_DIR) \
	  DOLPHIN_PROMTOOL=$(PROMTOOL) DOLPHIN_E2E_KEEP=$(TEST_KEEP) $(GO) test -count=1 -timeout 80m ./...
	$(MAKE) verify-generated
	$(MAKE) crd-gate

.PHONY: crd-gate
crd-gate: ## Fail on CRD changes that break stored objects or clients (vs the last release tag, or config/crd/baseline); tests of every rule first.
	cd tools/crdgate && $(GO) vet ./... && $(GO) test -count=1 ./... && $(GO) run . -repo ../..

.PHONY: crd-baseline
crd-baseline: ## At a release: make the current CRDs the baseline the gate compares with (until the release is tagged).
	rm -f config/crd/baseline/*.yaml && cp config/crd/bases/*.yaml config/crd/baseline/

BENCH_ROUNDS ?= 10
STALL_ROUNDS ?= 400
# BENCH_VERDICT ends a benchmark recipe that ran `{ go test …; echo $? >$rcfile; } | grep …`
# with DOLPHIN_BENCH_OUT=$out: it prints the summary and fails (non-zero exit) when the test
# failed, when there is no summary line with lost_acked_writes=N, or when N > 0. The grep in
# the pipeline would otherwise decide the exit status, and a failing benchmark would look green.
BENCH_VERDICT = rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "bench: no summary written (the test stopped before the end)"; fi; \
	  lost=$$(grep -oE 'lost_acked_writes=[0-9]+' $$out | tail -n 1 | cut -d= -f2); rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "bench: FAIL: the benchmark test failed (exit $$rc)"; exit $$rc; fi; \
	  if [ -z "$$lost" ]; then echo "bench: FAIL: no lost_acked_writes in the summary"; exit 1; fi; \
	  if [ "$$lost" -gt 0 ]; then echo "bench: FAIL: $$lost acknowledged writes lost"; exit 1; fi
.PHONY: bench-failover
BENCH_KIND ?= killed
bench-failover: mariadb ## Kill (BENCH_KIND=killed) or hang (BENCH_KIND=hung, SIGSTOP) the primary of a 3-instance cluster under write load K times (BENCH_ROUNDS), default detection; prints p50/p95/max and lost writes; fails on a lost write.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_FAILOVER_ROUNDS=$(BENCH_ROUNDS) DOLPHIN_BENCH_FAILOVER_KIND=$(BENCH_KIND) DOLPHIN_BENCH_OUT=$$out \
	    $(GO) test -count=1 -timeout 30m -run '^TestBenchFailover$$' -v ./internal/topology/; echo $$? >$$rcfile; } \
	    | grep -E 'round [0-9]+( trace| watch)?:|--- |^ok|FAIL|^panic:'; \
	  $(BENCH_VERDICT)

.PHONY: stress-semisync
stress-semisync: mariadb ## Restart a semi-sync replica's connection STALL_ROUNDS times with the CPUs kept busy; shows Dolphin ending MariaDB's ack-receiver stall.
	@burners=""; for i in $$(seq $$(nproc)); do sh -c 'while :; do :; done' & burners="$$burners $$!"; done; \
	  rcfile=$$(mktemp); \
	  { DOLPHIN_STALL_ROUNDS=$(STALL_ROUNDS) $(GO) test -count=1 -timeout 30m -run '^TestServerSemiSyncStallRecovery$$' -v ./internal/dbsql/; echo $$? >$$rcfile; } \
	    | grep -E 'semisync_stall_test|--- |^ok|FAIL'; \
	  kill $$burners; rc=$$(cat $$rcfile); rm -f $$rcfile; exit $$rc

# E2E_NODE is the node the end-to-end suites, benchmarks and chaos run on: real (containerd,
# kubelet, kube-proxy, CoreDNS; images built here) or process (pods as host processes, the
# Service proxy of `dolphin local`; kept for comparison and the operator-upgrade test).
E2E_NODE ?= real
E2E_DEPS = control-plane mariadb versitygw $(if $(filter real,$(E2E_NODE)),node images)
E2E_ENV = KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) DOLPHIN_VERSITYGW=$(VERSITYGW) DOLPHIN_E2E_NODE=$(E2E_NODE) \
	  DOLPHIN_NODE_BIN=$(NODE_BIN) DOLPHIN_IMAGES=$(IMAGES_DIR)

.PHONY: test-e2e
test-e2e: $(E2E_DEPS) ## End-to-end suite on `dolphin local` (needs root; E2E_NODE=real|process).
	$(E2E_ENV) $(GO) test -count=1 -timeout 80m -v ./test/e2e/

.PHONY: local-up
local-up: control-plane mariadb node images build ## Start the whole stack on this machine (root): control plane, a real node (containerd, kubelet, kube-proxy, CoreDNS), Dolphin installed from its image.
	bin/dolphin local up --node real --bin-dir $(KUBEBUILDER_ASSETS) --node-bin-dir $(NODE_BIN) --images $(IMAGES_DIR)

.PHONY: local-up-real
local-up-real: local-up ## Same as local-up (kept for those who learned it).

.PHONY: local-up-process
local-up-process: control-plane mariadb build ## The stack on the host-process node instead (pods as host processes, Dolphin's Service proxy; for comparisons).
	bin/dolphin local up --node process --bin-dir $(KUBEBUILDER_ASSETS)

.PHONY: local-down
local-down: build ## Stop everything `local-up` started.
	bin/dolphin local down

LOCAL_ROUNDS ?= 3
# READY_ROUNDS: clusters created one after the other for apply→Ready (p50/p99 and each phase).
READY_ROUNDS ?= 5
.PHONY: bench-local
bench-local: $(E2E_DEPS) ## On dolphin local (root; E2E_NODE=real|process, real by default: through kube-proxy): apply→Ready over READY_ROUNDS clusters, scale-up of one instance and restore from a backup (each phase timed) and client-view failover over LOCAL_ROUNDS rounds; fails on a lost write.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_LOCAL_ROUNDS=$(LOCAL_ROUNDS) DOLPHIN_BENCH_READY_ROUNDS=$(READY_ROUNDS) DOLPHIN_BENCH_OUT=$$out $(E2E_ENV) \
	    $(GO) test -count=1 -timeout 30m -run '^TestBenchLocal$$' -v ./test/e2e/; echo $$? >$$rcfile; } \
	    | grep --line-buffered -E 'round [0-9]+:|_test.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  $(BENCH_VERDICT)

# SUMMARY_VERDICT ends a benchmark recipe that ran `{ go test …; echo $? >$rcfile; } | grep …`
# with DOLPHIN_BENCH_OUT=$out: it prints the summary lines and exits with the test's status
# (the grep would otherwise decide it). For benches with no lost-write count (BENCH_VERDICT).
SUMMARY_VERDICT = rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "bench: no summary written (the test stopped before the end)"; fi; rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "bench: FAIL: the benchmark test failed (exit $$rc)"; fi; exit $$rc

THROUGHPUT_TIME ?= 20s
.PHONY: bench-throughput
bench-throughput: $(E2E_DEPS) ## On dolphin local (root; E2E_NODE=real|process): the price of durability, sysbench oltp_write_only and oltp_read_write (8, 32 threads, THROUGHPUT_TIME each) through the primary Service: one instance vs 3 with lossless semi-sync vs the same with TLS; ends with `throughput threads=8 … ratio=… tls_ratio=…`.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_THROUGHPUT=1 DOLPHIN_BENCH_THROUGHPUT_TIME=$(THROUGHPUT_TIME) DOLPHIN_BENCH_OUT=$$out $(E2E_ENV) \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchThroughput$$' -v ./test/e2e/; echo $$? >$$rcfile; } \
	    | grep --line-buffered -E '_test.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  $(SUMMARY_VERDICT)

LIVE_CLUSTERS ?= 1,5,10
LIVE_WINDOW ?= 60s
.PHONY: bench-live
bench-live: $(E2E_DEPS) ## On dolphin local (root; E2E_NODE=real|process): the operator's CPU and RSS with LIVE_CLUSTERS live 3-instance clusters (cumulative, real servers, default detection), per live instance; one line per count, the last `live clusters=…`.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_LIVE_CLUSTERS=$(LIVE_CLUSTERS) DOLPHIN_BENCH_LIVE_WINDOW=$(LIVE_WINDOW) DOLPHIN_BENCH_OUT=$$out $(E2E_ENV) \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchLive$$' -v ./test/e2e/; echo $$? >$$rcfile; } \
	    | grep --line-buffered -E '_test.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  $(SUMMARY_VERDICT)

FOOTPRINT_N ?= 10,100,300
# FOOTPRINT_ARGS: more `dolphin operator` flags for the bench, e.g. --gc-percent=100.
FOOTPRINT_ARGS ?=
# FOOTPRINT_GOMEMLIMIT: a Go soft memory limit for Dolphin's process only (e.g. 64MiB), to
# compare RSS with one; empty: none (the bench runs the operator in no container).
FOOTPRINT_GOMEMLIMIT ?=
.PHONY: bench-footprint
bench-footprint: control-plane moco ## The operator's RSS (mean over 2 idle minutes), StatefulSet creation time and idle CPU at FOOTPRINT_N clusters (cumulative) on a bare control plane, then MOCO's, the RSS per cluster and the ratios.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_FOOTPRINT_N=$(FOOTPRINT_N) DOLPHIN_BENCH_FOOTPRINT_ARGS="$(FOOTPRINT_ARGS)" DOLPHIN_BENCH_FOOTPRINT_GOMEMLIMIT=$(FOOTPRINT_GOMEMLIMIT) DOLPHIN_BENCH_OUT=$$out KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) DOLPHIN_MOCO=$(MOCO) \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchFootprint$$' -v ./cmd/dolphin/; echo $$? >$$rcfile; } \
	    | grep -E '_test.go:[0-9]+:|--- |^ok|FAIL|^panic:'; \
	  $(SUMMARY_VERDICT)

CHAOS_ROUNDS ?= 20
CHAOS_FAULTS ?=
# CHAOS_DETECTION_INTERVAL: the chaos cluster's failover.detection.interval (empty: the default, 1s).
CHAOS_DETECTION_INTERVAL ?=
# CHAOS_KEEP: where a failed run leaves every log (operator, node, each container).
CHAOS_STAMP := $(shell date +%Y%m%d-%H%M%S)
CHAOS_KEEP ?= $(CACHE_DIR)/chaos-logs/$(CHAOS_STAMP)
.PHONY: test-cutover-crashes
test-cutover-crashes: E2E_NODE = real
test-cutover-crashes: $(E2E_DEPS) ## On dolphin local's real node (root): a migration's cutover, and its fall back, with the operator killed after each of their steps (fenced, detached, opened); fails on a lost acknowledged write or a cutover or fall back not finished.
	DOLPHIN_E2E_CUTOVER_CRASHES=fenced,detached,opened DOLPHIN_E2E_FALLBACK_CRASHES=fenced,detached,opened $(E2E_ENV) \
	  $(GO) test -count=1 -timeout 45m -run '^(TestLocalCutoverSurvivesOperatorCrash|TestLocalFallBackSurvivesOperatorCrash)$$' -v ./test/e2e/

.PHONY: chaos
chaos: $(E2E_DEPS) ## On dolphin local (root; E2E_NODE=real|process): every fault kind CHAOS_ROUNDS times (CHAOS_FAULTS=a,b to pick) under the checker's clients and sysbench; one line per kind; fails on a lost write, split brain or a stale read. Bounded: 6 min per fault at most.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_CHAOS_ROUNDS=$(CHAOS_ROUNDS) DOLPHIN_CHAOS_FAULTS=$(CHAOS_FAULTS) DOLPHIN_CHAOS_DETECTION_INTERVAL=$(CHAOS_DETECTION_INTERVAL) DOLPHIN_CHAOS_OUT=$$out DOLPHIN_E2E_KEEP=$(CHAOS_KEEP) $(E2E_ENV) \
	    $(GO) test -count=1 -timeout $$(( $(CHAOS_ROUNDS) * 10 * 6 + 10 ))m -run '^TestChaos$$' -v ./test/e2e/; echo $$? >$$rcfile; } \
	    | grep --line-buffered -E 'round [0-9]+:|chaos fault=|_test.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "chaos: no summary written (the test stopped before the end)"; fi; rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "chaos: FAIL (exit $$rc); logs kept in $(CHAOS_KEEP)"; exit $$rc; fi

DAY2_ROUNDS ?= 3
.PHONY: bench-day2
bench-day2: $(E2E_DEPS) ## On dolphin local (root; E2E_NODE=real|process): client-view cost of password rotation, a run-time setting and a restart-needing change over DAY2_ROUNDS rounds; fails on a lost write.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_DAY2_ROUNDS=$(DAY2_ROUNDS) DOLPHIN_BENCH_OUT=$$out $(E2E_ENV) \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchDay2$$' -v ./test/e2e/; echo $$? >$$rcfile; } \
	    | grep -E 'round [0-9]+:|--- |^ok|FAIL|^panic:'; \
	  $(BENCH_VERDICT)

PITR_SECONDS ?= 60
PITR_WRITERS ?= 4
# PITR_VERDICT ends the bench-pitr recipe: it prints the figures and fails (non-zero exit)
# when the test failed (an inexact restore, a lost acknowledged write), when there is no
# summary line "pitr archive_lag_p50=…", or when not every restore was exact.
PITR_VERDICT = rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "bench: no figures written (the test stopped before the end)"; fi; \
	  summary=$$(grep -E '^pitr archive_lag_p50=' $$out | tail -n 1); rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "bench: FAIL: the benchmark test failed (exit $$rc)"; exit $$rc; fi; \
	  if [ -z "$$summary" ]; then echo "bench: FAIL: no summary line 'pitr archive_lag_p50=…'"; exit 1; fi; \
	  k=$$(echo "$$summary" | grep -oE 'restores_exact=[0-9]+/[0-9]+' | cut -d= -f2); \
	  if [ -z "$$k" ] || [ "$$(echo $$k | cut -d/ -f1)" != "$$(echo $$k | cut -d/ -f2)" ]; then echo "bench: FAIL: restores_exact=$$k"; exit 1; fi
.PHONY: bench-pitr
bench-pitr: mariadb versitygw ## Archive lag under PITR_WRITERS writers for PITR_SECONDS (semi-sync primary, archiver on the replica, versitygw), replay speed vs mariadb-binlog | mariadb, exact restores; fails on an inexact restore or a lost write.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_PITR_SECONDS=$(PITR_SECONDS) DOLPHIN_BENCH_PITR_WRITERS=$(PITR_WRITERS) DOLPHIN_BENCH_OUT=$$out DOLPHIN_VERSITYGW=$(VERSITYGW) \
	    $(GO) test -count=1 -timeout 30m -run '^TestBenchPITR$$' -v ./internal/binlog/; echo $$? >$$rcfile; } \
	    | grep -E 'step: |_test\.go:[0-9]+: .*(restore|Replay|FAIL|want)|--- |^ok|FAIL|^panic:'; \
	  $(PITR_VERDICT)

BACKUP_GIB ?= 1
# BACKUP_VERDICT ends the bench-backup recipe as BENCH_VERDICT ends the others, for a summary
# without lost_acked_writes: it prints the figures and fails (non-zero exit) when the test
# failed or wrote no summary line "backup bytes=… backup_ratio=…".
BACKUP_VERDICT = rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "bench: no figures written (the test stopped before the end)"; fi; \
	  summary=$$(grep -E '^backup bytes=[0-9]+ backup_ratio=[0-9.]+ restore_ratio=[0-9.]+ pipeline_backup_ratio=[0-9.]+ pipeline_restore_ratio=[0-9.]+ ' $$out | tail -n 1); rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "bench: FAIL: the benchmark test failed (exit $$rc)"; exit $$rc; fi; \
	  if [ -z "$$summary" ]; then echo "bench: FAIL: no summary line 'backup bytes=… backup_ratio=…'"; exit 1; fi
METRICS_SCRAPES ?= 200
.PHONY: bench-instance-metrics
bench-instance-metrics: mariadb mysqld-exporter ## A replica's own metrics served by Dolphin's agent vs a mysqld_exporter sidecar, METRICS_SCRAPES scrapes each: RSS and CPU per scrape; fails when a scrape fails or the series differ.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_METRICS_SCRAPES=$(METRICS_SCRAPES) DOLPHIN_BENCH_OUT=$$out DOLPHIN_MYSQLD_EXPORTER=$(MYSQLD_EXPORTER) \
	    $(GO) test -count=1 -timeout 15m -run '^TestBenchInstanceMetrics$$' -v ./internal/instancemetrics/; echo $$? >$$rcfile; } \
	    | grep -E '_test\.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  rc=$$(cat $$rcfile); rm -f $$rcfile; \
	  if [ -s $$out ]; then cat $$out; else echo "bench: no figures written (the test stopped before the end)"; fi; \
	  summary=$$(grep -E '^instance-metrics scrapes=[0-9]+ .* same_series=true$$' $$out | tail -n 1); rm -f $$out; \
	  if [ "$$rc" != 0 ]; then echo "bench: FAIL: the benchmark test failed (exit $$rc)"; exit $$rc; fi; \
	  if [ -z "$$summary" ]; then echo "bench: FAIL: no summary line 'instance-metrics … same_series=true'"; exit 1; fi

MIGRATE_GIB ?= 1
.PHONY: bench-migrate
bench-migrate: mariadb ## A migration's engine steps on real servers with a MIGRATE_GIB GiB dataset: logical copy vs mariadb-dump | mariadb, catch-up, verification, cutover under a writer; fails on a checksum mismatch or a lost write.
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_MIGRATE_GIB=$(MIGRATE_GIB) DOLPHIN_BENCH_OUT=$$out \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchMigrate$$' -v ./internal/migrate/; echo $$? >$$rcfile; } \
	    | grep --line-buffered -E '_test\.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  $(BENCH_VERDICT)

.PHONY: bench-backup
bench-backup: mariadb versitygw ## Backup (real agent → versitygw), restore and clone of a generated BACKUP_GIB GiB dataset: ratios to mariadb-backup and to the hand pipeline (| zstd | aws s3 cp), agent peak RSS; fails on a failed or mismatching restore.
	hack/install-pipeline-tools.sh
	@out=$$(mktemp); rcfile=$$(mktemp); \
	  { DOLPHIN_BENCH_BACKUP_GIB=$(BACKUP_GIB) DOLPHIN_BENCH_OUT=$$out DOLPHIN_VERSITYGW=$(VERSITYGW) \
	    $(GO) test -count=1 -timeout 40m -run '^TestBenchBackup$$' -v ./internal/backup/; echo $$? >$$rcfile; } \
	    | grep -E '_test\.go:[0-9]+: |--- |^ok|FAIL|^panic:'; \
	  $(BACKUP_VERDICT)
