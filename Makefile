# The two commands a new user needs: `make demo` and `make test`.
# Both install missing system packages first (scripts/install-deps).
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_WIN  ?= build-win
MESON_OPTS ?= -Dwerror=true -Dbuildtype=release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps build demo test test-unit test-asan test-tsan test-windows bench clean

all: build

deps:
	@bash scripts/install-deps

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/demos/linreg --devices cpu:4

test: build
	meson test -C $(BUILD) --print-errorlogs --num-processes $(JOBS)

test-unit: build
	meson test -C $(BUILD) --print-errorlogs --suite unit

$(BUILD_ASAN)/build.ninja:
	meson setup $(BUILD_ASAN) -Dwerror=true -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

# AddressSanitizer + UBSan over every suite (engine, OpenCL, Vulkan, MPI);
# driver-internal leaks are suppressed by scripts/lsan.supp.
# TD_TEST_SLOWDOWN: the few tests whose bounds are kernel time (a cancelled
# GEMM ends within a tile) scale them; ASan instruments the own GEMMs, the
# CPU devices' default engines, and they run several times slower.
# --timeout-multiplier: meson's per-test timeouts are sized for the release
# build; this debug (-O0) + ASan build runs the deterministic own GEMM
# about 190x slower (one engine_cpu_cancel test: 0.7 s -> 131 s), so that
# test took 270 s of its 300 on a quiet machine, and it and tools_cli ran
# past their limits when another job shared the cores.
test-asan: deps $(BUILD_ASAN)/build.ninja
	ninja -C $(BUILD_ASAN) -j $(JOBS)
	TD_TEST_SLOWDOWN=$${TD_TEST_SLOWDOWN:-10} \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp \
	meson test -C $(BUILD_ASAN) --timeout-multiplier 3 --print-errorlogs --suite unit --suite slow --suite backend --num-processes $(JOBS)
	# The processes over Open MPI too; leak checks off there: Open MPI's
	# own allocations outlive MPI_Finalize by design.
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	meson test -C $(BUILD_ASAN) --timeout-multiplier 3 --print-errorlogs --suite mpi --num-processes 1 --no-rebuild

# ThreadSanitizer over the threaded scenarios (ring, pmap, training,
# faults, balance, host pool, CPU cancel, platform; the host pool's race
# program; the demos on cpu:4 and cpu:8) in $(BUILD_TSAN), through the
# Criterion shim; the first report fails it (scripts/test-tsan).
test-tsan: deps
	bash scripts/test-tsan $(BUILD_TSAN)

# Windows x86-64 cross build (mingw-w64) run under wine64: the demos and
# the CLI on cpu:4, the MLP's losses against $(BUILD)'s, then the unit
# suite (scripts/windows-check; "skipped" without mingw or wine). About
# two minutes on this 2-core machine: 20-37 s for a fresh build, 20 s of
# demos, 70 s of unit suite (the first wine start in a new prefix adds ~1 min).
test-windows:
	JOBS=$(JOBS) bash scripts/windows-check $(BUILD_WIN) $(BUILD)

bench: build
	$(BUILD)/bench/membw
	$(BUILD)/bench/allreduce
	$(BUILD)/bench/gemm --devices cpu:1

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_WIN)
