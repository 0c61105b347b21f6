# SPDX-License-Identifier: MIT
# A thin front for CMake. `make run` and `make test` are all the set-up a new
# Debian 12 machine needs: both install missing Debian packages first.
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

# One target at a time: `make -j4 test` must install the packages before CMake looks for
# them. The build itself runs $(JOBS) jobs (cmake --build -j), whatever -j make was given.
.NOTPARALLEL:

.PHONY: all build deps deps-test deps-bench deps-fuzz fuzz run test bench install clean \
        asan tsan test-asan test-tsan format check

all: build

deps:
	@scripts/deps.sh build

deps-test:
	@scripts/deps.sh test

deps-bench:
	@scripts/deps.sh bench

deps-fuzz:
	@scripts/deps.sh fuzz

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@scripts/run.sh $(BUILD)

test: deps-test build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: deps-bench build
	@scripts/bench.sh $(BUILD)

# As root, ldconfig makes the new shared libraries known to the loader at once.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)
	@if [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# Sanitizer builds, each in its own directory (CI runs both).
asan: deps-test
	cmake -S . -B build-asan -DSEMA_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DSEMA_WERROR=ON -DSEMA_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS)

tsan: deps-test
	cmake -S . -B build-tsan -DSEMA_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEMA_WERROR=ON -DSEMA_BUILD_BENCH=OFF
	cmake --build build-tsan -j $(JOBS)

test-asan: asan
	ctest --test-dir build-asan --output-on-failure -j $(JOBS)

test-tsan: tsan
	ctest --test-dir build-tsan --output-on-failure -j $(JOBS)

# libFuzzer on every fuzz target for FUZZ_SECONDS each (CI runs it bounded).
FUZZ_SECONDS ?= 60
fuzz: deps-fuzz
	@scripts/fuzz.sh $(FUZZ_SECONDS)

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

check:
	@scripts/check-source.sh .

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
