# kvlab: the two commands a new user types are `make run` and `make test`.
# Both install missing Debian packages (scripts/install-deps), configure and build first.

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test test-sanitize format clean

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

# The hostile-input suite against kvlab-asan: this build's program with its torch-free code
# (where input is parsed and checked) compiled again under AddressSanitizer +
# UndefinedBehaviorSanitizer; CI runs it after `make test`. An out-of-bounds access or undefined
# behaviour on bad input fails it. Only the torch-free files compile again. malloc_context_size=0
# halves each start (libtorch allocates a lot while it loads): a report still names the bad
# access and its stack; run the failing case again without it to see where the memory came from.
test-sanitize: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target kvlab-asan kvlab_hostile_tests
	@cd $(BUILD_DIR) && KVLAB_HOSTILE_BIN=$$PWD/bin/kvlab-asan ASAN_OPTIONS=detect_leaks=0:malloc_context_size=0 \
	  ctest --output-on-failure -j $(JOBS) -R HostileInput

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD_DIR)
