# qkv's front door. `make test` and `make run` work on a fresh Debian machine: they install the
# missing packages (when run as root), configure, build and then test or run.
BUILD   ?= build
JOBS    ?= 2
CMAKE_FLAGS ?=
QKV     := $(BUILD)/qkv

# Debian packages the build needs, and a header that proves each one is installed.
DEPS_PKGS    := libboost-test-dev libstb-dev zlib1g-dev libcli11-dev nlohmann-json3-dev libopenblas-dev
DEPS_HEADERS := /usr/include/boost/test/unit_test.hpp /usr/include/stb/stb_image_write.h \
                /usr/include/zlib.h /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp \
                /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h
ifeq ($(DATA),fashion-mnist)
DEPS_PKGS += dataset-fashion-mnist
endif

.PHONY: all build test run deps deps-check clean format bench

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

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps-check $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure

run: build
	$(QKV) train translate --config train/configs/dates.json --out runs/dates

bench: build
	$(QKV) bench gemm
	$(QKV) bench ops

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
