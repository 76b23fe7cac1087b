# memreplay: build, test, benchmark. `make test` is what CI runs (.ci/run).
# `make figures` regenerates the docs' SVG figures (needs Chromium).

GO ?= go
FUZZTIME ?= 5m

.PHONY: all build install demo test fmt-check vet race allocs fuzz bench figures

all: build

build:
	$(GO) build ./...

# The memreplay command, where `go install` puts it: $(go env GOBIN), or
# $(go env GOPATH)/bin when GOBIN is unset. That folder must be on PATH.
install:
	$(GO) install ./cmd/memreplay
	@bin=$$($(GO) env GOBIN); [ -n "$$bin" ] || bin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	echo "installed $$bin/memreplay"; \
	case ":$$PATH:" in *":$$bin:"*) ;; *) echo "$$bin is not on PATH: export PATH=\"$$bin:\$$PATH\"";; esac

# A first look: BERT-base trials of the trial model, one after another in one
# process on a simulated 24 GiB GPU, under PyTorch's defaults and expandable
# segments.
demo:
	$(GO) run ./cmd/memreplay demo

# gofmt (fails on any output), go vet, and the race-enabled tests, which end
# with a summary of the tests skipped and why (internal/testsummary; plain
# go test hides skips).
test: fmt-check vet race allocs

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# -timeout 30m: under the race detector the allocator's and the replay's
# packages take 3 to 6 minutes on a 2-CPU machine, and a busy machine has
# pushed them past go test's default of 10 minutes a package; a real hang
# still ends the run.
race:
	GO=$(GO) $(GO) run ./internal/testsummary -race -count=1 -timeout 30m ./...

# The tests that count heap allocations skip under the race detector (it
# allocates): run them again without it, so that CI checks them.
allocs:
	$(GO) test -count=1 -run 'TestRecordAllocatesNothingPerEntry|TestRecordNativeInputMemoryFlat|TestReleasedReaderAllocations|TestGrowingToPeakAllocatesInChunks' ./allocator ./sim/replay ./sim/trial

# Coverage-guided fuzzing of the allocator, the settings parser, the
# placement solver and its CSV reader, the trace
# importers, the replay, memory_stats files, the trial spec, the study's
# space and state files (and their size bounds), and the CUDA backend's
# calls (on the fake driver).
fuzz:
	$(GO) test ./allocator -run '^$$' -fuzz FuzzAllocator -fuzztime $(FUZZTIME)
	$(GO) test ./allocator/config -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
	$(GO) test ./allocator/placement -run '^$$' -fuzz FuzzReadCSV -fuzztime $(FUZZTIME)
	$(GO) test ./allocator/placement -run '^$$' -fuzz FuzzSolve -fuzztime $(FUZZTIME)
	$(GO) test ./trace -run '^$$' -fuzz FuzzPickle -fuzztime $(FUZZTIME)
	$(GO) test ./trace -run '^$$' -fuzz FuzzPyTorch -fuzztime $(FUZZTIME)
	$(GO) test ./trace -run '^$$' -fuzz FuzzNative -fuzztime $(FUZZTIME)
	$(GO) test ./trace -run '^$$' -fuzz FuzzRMM -fuzztime $(FUZZTIME)
	$(GO) test ./sim/replay -run '^$$' -fuzz FuzzReplay -fuzztime $(FUZZTIME)
	$(GO) test ./sim/replay -run '^$$' -fuzz FuzzMemoryStats -fuzztime $(FUZZTIME)
	$(GO) test ./sim/trial -run '^$$' -fuzz FuzzSpec -fuzztime $(FUZZTIME)
	$(GO) test ./sim/study -run '^$$' -fuzz FuzzParseSpace -fuzztime $(FUZZTIME)
	$(GO) test ./sim/study -run '^$$' -fuzz 'FuzzReadState$$' -fuzztime $(FUZZTIME)
	$(GO) test ./sim/study -run '^$$' -fuzz FuzzReadStateLineBound -fuzztime $(FUZZTIME)
	$(GO) test ./sim/study -run '^$$' -fuzz FuzzReadSpaceBound -fuzztime $(FUZZTIME)
	$(GO) test ./allocator/cuda -run '^$$' -fuzz FuzzDeviceCalls -fuzztime $(FUZZTIME)

# BENCH_BASE is the commit that `make bench` compares the real-snapshot
# corpus with (bench/corpus.sh): main before issue 19's replay work.
BENCH_BASE ?= 79798aa

# Every figure of docs/performance.md with its baseline in the same run:
# the allocator's hot path (docs/allocator.md), the replay's throughput
# beside the trace decoder alone (docs/replay.md), the real-snapshot
# corpus beside BENCH_BASE's code (bench/corpus.sh), the trial model
# under par and trials (events/s on one core, allocations per event)
# beside BENCH_BASE's (bench/compare.sh), the snapshot import
# beside Python's pickle.load of the same file, the C ABI's pair
# beside the allocator alone and glibc's malloc+free, and the four
# commands on a 1 GB snapshot beside BENCH_BASE's (bench/bigsnap.sh).
# The machine and its load average are printed first: on a shared machine
# the ratios hold, the absolute times move with the load.
bench:
	@echo "machine: $$(nproc) CPUs,$$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $$(cut -d' ' -f1-3 /proc/loadavg)"
	bash bench/allocator.sh
	bash bench/replay.sh
	bash bench/corpus.sh $(BENCH_BASE) "" 5 10
	bash bench/compare.sh $(BENCH_BASE) 6 'sim/workers'
	bash bench/import.sh
	bash bench/libmemreplay.sh
	bash bench/bigsnap.sh $(BENCH_BASE) 1
	@echo "machine: load average $$(cut -d' ' -f1-3 /proc/loadavg) at the end"

# growth: time, CPU time and peak RSS of replay, import, report and par
# against the size of the work (10^3..10^8 events, 1..64 mixes), as
# docs/data/growth.csv and log-log plots in docs/img (docs/performance.md,
# "How cost grows"). GROWTH_MAX=1e6 runs in minutes and writes to
# bench/out instead. scaling: the trial model and par at GOMAXPROCS 1 to
# nproc, efficiency per core.
.PHONY: growth scaling profiles
growth:
	bash bench/growth.sh
scaling:
	bash bench/scaling.sh

# profiles: CPU profiles of the replay (with and without the profiler) and
# of the trial model behind par, on one core, into docs/profiles/ with
# their `go tool pprof -top` readings (bench/profiles.sh).
profiles:
	bash bench/profiles.sh

# bench-compare OLD=<commit>: the same benchmarks on OLD (a git worktree in
# a temporary directory) and on the working tree, alternately in one run,
# compared by benchstat (golang.org/x/perf, pinned in bench/compare.sh).
# COUNT runs of each on each side; PKGS limits it to matching packages.
OLD ?=
COUNT ?= 6
PKGS ?= .
.PHONY: bench-compare
bench-compare:
	@[ -n "$(OLD)" ] || { echo "usage: make bench-compare OLD=<commit> [COUNT=6] [PKGS=regexp]"; exit 2; }
	bash bench/compare.sh $(OLD) $(COUNT) '$(PKGS)'

# The docs' figures (docs/report.md): `memreplay report` on the real
# PyTorch trace in traces/ and on a generated trial (when present), each
# chart of the HTML page rendered in headless Chromium and saved as SVG,
# so the docs show exactly what the page draws.
FIGURE_TRACE ?= traces/pytorch/cs336_silmont2000_memory_forward_fp32_128.pickle
TRIAL_TRACE ?= traces/trial/bert-base_b16_s128_fp16.mrt
figures:
	@tmp=$$(mktemp -d) && \
	$(GO) run ./cmd/memreplay report $(FIGURE_TRACE) --alloc-conf expandable_segments:True \
		--progress=false -o $$tmp/pytorch.html --svg docs/img/pytorch && \
	if [ -f $(TRIAL_TRACE) ]; then \
		$(GO) run ./cmd/memreplay report $(TRIAL_TRACE) --alloc-conf expandable_segments:True \
			--progress=false -o $$tmp/trial.html --svg docs/img/trial; \
	fi; status=$$?; rm -rf $$tmp; exit $$status

# libmemreplay.so: the allocator as the shared library PyTorch loads in place
# of its own (torch.cuda.memory.CUDAPluggableAllocator; docs/libmemreplay.md).
# Needs cgo and a C compiler, no CUDA toolkit.
.PHONY: libmemreplay
libmemreplay:
	$(GO) build -buildmode=c-shared -o dist/libmemreplay.so ./cmd/libmemreplay

# gpu-dist: everything a GPU machine without Go needs, built here (x86-64,
# cgo, glibc 2.34+): the CLI, the CUDA backend's test binary and the
# PyTorch plug-in, in dist/. Carry dist/ and run bench/gpu-check.sh and
# bench/gpu-pytorch.sh there (docs/cuda.md, docs/libmemreplay.md).
.PHONY: gpu-dist
gpu-dist: libmemreplay
	$(GO) build -o dist/memreplay ./cmd/memreplay
	$(GO) test -c -o dist/cuda.test ./allocator/cuda

# gpu-check: on a machine with an NVIDIA GPU, after `make gpu-dist` (here or
# there), docs/cuda.md's whole checklist (bench/gpu-all.sh, each step under a
# time limit): the backend's suite on the real driver and every trace
# replayed on the GPU (bench/gpu-check.sh), PyTorch trained with its own
# allocator and with libmemreplay (bench/gpu-pytorch.sh, needs torch), and
# BERT-base trials recorded and replayed against their memory_stats(), on
# the whole GPU and under a 24 GiB limit. Results in $(OUT) (docs/cuda.md).
OUT ?= out
.PHONY: gpu-check
gpu-check:
	OUT=$(OUT) bash bench/gpu-all.sh
