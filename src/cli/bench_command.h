#pragma once

#include <CLI/CLI.hpp>

#include "experiments/bench.h"

namespace kvlab {

struct BenchCommands {
  CLI::App* train = nullptr;
  CLI::App* memory = nullptr;
  CLI::App* compute = nullptr;
  CLI::App* decode = nullptr;
  CLI::App* prefill = nullptr;
  CLI::App* generate = nullptr;
};
BenchCommands add_bench_commands(CLI::App& app, BenchTrainOptions& train_options,
                                 BenchMemoryOptions& memory_options,
                                 BenchComputeOptions& compute_options,
                                 BenchDecodeOptions& decode_options,
                                 BenchModelOptions& model_options);

}  // namespace kvlab
