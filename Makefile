# qkv's front door. `make test` and `make run` work on a fresh Debian machine: they install the
# missing packages (when run as root), configure, build and then test or run.
BUILD   ?= build
JOBS    ?= 2
CMAKE_FLAGS ?=
QKV     := $(BUILD)/qkv

# Debian packages the build needs, and a header that proves each one is installed.
# MPI (data parallelism, docs/DISTRIBUTED.md) is optional to the build, which leaves it out when
# it is not found; `make deps` installs OpenMPI so that a fresh machine builds and tests it too.
DEPS_PKGS    := libboost-test-dev libstb-dev zlib1g-dev libcli11-dev nlohmann-json3-dev libopenblas-dev \
                libopenmpi-dev openmpi-bin
DEPS_HEADERS := /usr/include/boost/test/unit_test.hpp /usr/include/stb/stb_image_write.h \
                /usr/include/zlib.h /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp \
                /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
                /usr/include/x86_64-linux-gnu/mpi/mpi.h /usr/bin/mpirun
ifeq ($(DATA),fashion-mnist)
DEPS_PKGS += dataset-fashion-mnist
endif
# The language model's default corpus: Debian's fortune files, concatenated into data/fortunes.txt
# (make deps DATA=fortunes installs the package and writes the file).
FORTUNES_DIR := /usr/share/games/fortunes
ifeq ($(DATA),fortunes)
DEPS_PKGS += fortunes
endif
# PyTorch for the parity suite (make test-torch); `make deps TORCH=1` installs it with the rest.
TORCH_PKGS := python3-torch python3-numpy
ifeq ($(TORCH),1)
DEPS_PKGS += $(TORCH_PKGS)
endif

.PHONY: all build test test-torch run deps deps-check clean format bench fuzz sanitize tsan valgrind fortunes

all: build

deps-check:
	@missing=""; for h in $(DEPS_HEADERS); do [ -e $$h ] || missing="$$missing $$h"; done; \
	if [ -n "$$missing" ]; then echo "missing:$$missing"; $(MAKE) --no-print-directory deps; fi

deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  echo "installing: $(DEPS_PKGS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEPS_PKGS); \
	else \
	  echo "run as root: apt-get update && apt-get install -y $(DEPS_PKGS)"; exit 1; \
	fi
	@if [ "$(DATA)" = fortunes ]; then $(MAKE) --no-print-directory fortunes; fi

# Every fortune file (plain text, fortunes separated by lines holding '%'), in name order; the
# .dat indexes and .u8 links are left out.
fortunes:
	@[ -d $(FORTUNES_DIR) ] || { echo "no $(FORTUNES_DIR): install Debian's fortunes package with: make deps DATA=fortunes"; exit 1; }
	@mkdir -p data
	@find $(FORTUNES_DIR) -maxdepth 1 -type f ! -name '*.dat' | sort | xargs cat >data/fortunes.txt.tmp
	@mv data/fortunes.txt.tmp data/fortunes.txt
	@echo "data/fortunes.txt: $$(wc -c <data/fortunes.txt) bytes from $$(find $(FORTUNES_DIR) -maxdepth 1 -type f ! -name '*.dat' | wc -l) fortune files"

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps-check $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure

# The PyTorch parity suite (tests/torch, docs/TESTING.md): installs PyTorch when missing (as root),
# builds the driver and compares every case against PyTorch; skipped, never passed, without it.
test-torch: deps-check $(BUILD)/CMakeCache.txt
	@/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
	  $(MAKE) --no-print-directory deps DEPS_PKGS="$(TORCH_PKGS)"
	cmake --build $(BUILD) -j$(JOBS) --target torch_parity_driver run_logits qkv
	tests/torch/run.sh $(BUILD)/torch_parity_driver

# `make run` trains into runs/dates, or runs/dates-2, -3, ... when that is taken: a second
# `make run` never replaces the first one's work (qkv refuses a folder that holds a run).
RUN_DIR ?= $(shell d=runs/dates; n=1; while [ -e $$d ]; do n=$$((n+1)); d=runs/dates-$$n; done; echo $$d)
# It builds the qkv executable alone (CPU): the tests, benchmarks, fuzzers, the CUDA library and
# the emulated backend are `make build`'s and `make test`'s.
run: deps-check $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target qkv
	$(QKV) train translate --config train/configs/dates.json --out $(RUN_DIR)

bench: build
	$(QKV) bench gemm
	$(QKV) bench ops

# ---- testing tools (docs/TESTING_TOOLS.md) ------------------------------------------------------
# make fuzz: every libFuzzer target of tests/fuzz for FUZZ_SECONDS each, one at a time (clang).
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_LOADERS ?= $(patsubst tests/fuzz/fuzz_%.cpp,%,$(wildcard tests/fuzz/fuzz_*.cpp))
fuzz: deps-check
	@command -v clang++ >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
	  >/dev/null 2>&1 || $(MAKE) --no-print-directory deps DEPS_PKGS="clang libclang-rt-14-dev"
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DWITH_CUDA=OFF -DQKV_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_LOADERS))
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_LOADERS)

# The whole ctest suite in its own build under a sanitizer, at -O1 with assertions on and CUDA off:
# $(call sanitized_suite,BUILD_DIR,CMAKE_OPTION,RUNTIME_OPTIONS,CTEST_TIMEOUT,CTEST_ARGS). Boost.Test
# must not catch a sanitizer's abort: a test that carried on after one hung in the thread pool.
# MPI is left out: OpenMPI never frees what it allocates at start-up, and LeakSanitizer's report
# of it would fail every MPI test.
define sanitized_suite
	cmake -S . -B $(1) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DWITH_CUDA=OFF -DWITH_MPI=OFF $(2) $(CMAKE_FLAGS)
	cmake --build $(1) -j$(JOBS)
	cd $(1) && $(3) BOOST_TEST_CATCH_SYSTEM_ERRORS=no \
	  ctest --output-on-failure --timeout $(4) -j$(JOBS) $(5)
endef

# make sanitize: ASan + UBSan (CUDA off: the CUDA runtime and ASan's shadow memory do not mix).
# SANITIZE_CTEST passes ctest arguments (e.g. SANITIZE_CTEST="-R nn").
SANITIZE_BUILD ?= build-sanitize
SANITIZE_CTEST ?=
sanitize: deps-check
	$(call sanitized_suite,$(SANITIZE_BUILD),-DQKV_SANITIZE=ON,ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1,900,$(SANITIZE_CTEST))

# make tsan: ThreadSanitizer, for data races between the thread pool's workers and the caller, or
# between kernels' chunks. A report fails the test. TSAN_CTEST passes ctest arguments.
TSAN_BUILD ?= build-tsan
TSAN_CTEST ?=
tsan: deps-check
	$(call sanitized_suite,$(TSAN_BUILD),-DQKV_TSAN=ON,TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1,1800,$(TSAN_CTEST))

# make valgrind: memcheck on a short training run. Its own build without -march=native: valgrind
# does not know AVX-512, which -march=native emits on such CPUs (SIGILL at start-up).
VALGRIND_BUILD ?= build-valgrind
valgrind: deps-check
	@command -v valgrind >/dev/null || $(MAKE) --no-print-directory deps DEPS_PKGS=valgrind
	cmake -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQKV_NATIVE=OFF \
	  -DWITH_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(VALGRIND_BUILD) -j$(JOBS) --target qkv
	tests/valgrind/run.sh $(VALGRIND_BUILD)/qkv

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
