# memreplay: build, test, benchmark. `make test` is what CI runs (.ci/run).

GO ?= go
FUZZTIME ?= 5m

.PHONY: all build demo test fmt-check vet race fuzz bench

all: build

build:
	$(GO) build ./...

# The main job on the embedded default: the allocator on the built-in
# workload on a simulated 24 GiB GPU.
demo:
	$(GO) run ./cmd/memreplay demo

# gofmt (fails on any output), go vet, and the race-enabled tests.
test: fmt-check vet race

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -count=1 ./...

# Coverage-guided fuzzing of the allocator, the settings parser, the trace
# importers and the replay.
fuzz:
	$(GO) test ./allocator -run '^$$' -fuzz FuzzAllocator -fuzztime $(FUZZTIME)
	$(GO) test ./allocator/config -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME)
	$(GO) test ./profiler/trace -run '^$$' -fuzz FuzzPickle -fuzztime $(FUZZTIME)
	$(GO) test ./profiler/trace -run '^$$' -fuzz FuzzPyTorch -fuzztime $(FUZZTIME)
	$(GO) test ./profiler/trace -run '^$$' -fuzz FuzzNative -fuzztime $(FUZZTIME)
	$(GO) test ./profiler/trace -run '^$$' -fuzz FuzzRMM -fuzztime $(FUZZTIME)
	$(GO) test ./sim/replay -run '^$$' -fuzz FuzzReplay -fuzztime $(FUZZTIME)

# The allocator's hot-path benchmarks (figures in docs/allocator.md) and the
# replay's throughput (docs/replay.md).
bench:
	bash bench/allocator.sh
	bash bench/replay.sh
