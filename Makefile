# kvlab: the two commands a new user types are `make run` and `make test`.
# Both install missing Debian packages (scripts/install-deps), configure and build first.

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run test format clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: for now, the default KV-cache comparison of `kvlab cache`.
run: build
	@$(BUILD_DIR)/bin/kvlab cache

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf $(BUILD_DIR)
