# kvlab: the two commands a new user types are `make run` and `make test`.
# Both install missing Debian packages (scripts/install-deps), configure and build first.

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test test-quick test-sanitize test-python format clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: train the six variants of seed 003's Table 2 on the five synthetic tasks
# (3 seeds, quick preset: about 7 minutes on 2 cores) and print the comparison table.
run: build
	@$(BUILD_DIR)/bin/kvlab compare --suite synthetic --preset quick --out $(BUILD_DIR)/compare-quick

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# The edit loop (under 2 minutes once built): the unit tests of the layers under the program —
# spec, io, cache, report, kernels, nn, infer, convert, serve — built without the program, its sanitized
# twin or the end-to-end suites (ctest label `quick`). `make test` runs everything.
QUICK_TESTS = kvlab_spec_tests kvlab_kernel_tests kvlab_layer_tests kvlab_alloc_tests \
              kvlab_serve_tests
test-quick: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target $(QUICK_TESTS)
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L quick

# The hostile-input suite alone (`make test` runs it too): ~330 malformed inputs against
# kvlab-asan, this build's program with its torch-free code (where input is parsed and checked)
# compiled again under AddressSanitizer + UndefinedBehaviorSanitizer.
test-sanitize: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -R HostileInput

# The Python package's tests alone (pytest; `make test` runs them too).
test-python: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -R PythonPackage

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD_DIR)
