#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>

namespace kvlab {

struct BenchTrainOptions {
  std::string attn = "mha";
  int64_t d_model = 128, layers = 4, heads = 4, seq_len = 128, batch = 32;
  int threads = 1;
  int64_t steps = 10;
  int64_t warmup = 3;
  std::string format = "table";
};

// `kvlab bench train`: tokens/s of full training steps (forward, backward, AdamW) of a
// small byte-level GPT on random tokens; median and spread over steps after warm-up.
CLI::App* add_bench_commands(CLI::App& app, BenchTrainOptions& train_options);
int run_bench_train(const BenchTrainOptions& options, std::ostream& out);

}  // namespace kvlab
