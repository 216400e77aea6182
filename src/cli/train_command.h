#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "spec/model_config.h"
#include "train/train_options.h"

namespace kvlab {

namespace data {
class Task;
}

// Model flags of the commands that train: the kind, vocabulary and context come from the
// task; the rest defaults to a small GPT-style model (2 layers, D 64, 4 heads of 16,
// GELU MLP of 4·D, LayerNorm, biases, learned positions, untied output).
struct TrainModelFlags {
  std::optional<int64_t> layers, d_model, heads, head_dim, mlp;
  std::optional<std::string> mlp_kind, norm, bias, pos;
  std::optional<double> rope_theta;

  void add(CLI::App& app);
  ModelShape shape_for(const data::Task& task) const;
};

struct TrainCommandOptions {
  std::string task;
  std::string data;
  std::optional<int64_t> seq_len;
  int64_t eval_sequences = 1000;
  std::string attn = "mha";
  TrainModelFlags model;
  train::TrainOptions train;
  int threads = 0;
  std::string out;
  std::string resume;
  std::string format = "table";
  bool no_progress = false;
};

CLI::App* add_train_command(CLI::App& app, TrainCommandOptions& options);
// Exit status: 0 finished, 130 interrupted (checkpoint saved), 3 diverged. Throws for bad input.
int run_train(const TrainCommandOptions& options, const CLI::App& command,
              const std::atomic<bool>* stop, std::ostream& out);

struct EvalCommandOptions {
  std::string checkpoint;
  std::string format = "table";
  int threads = 0;
  std::vector<int64_t> contexts;  // text tasks: evaluate at each context length (seed 003 T16)
  std::string data;               // replaces the recorded data file (same content)
  bool allow_different_data = false;
  std::string precision;    // set: evaluate through the decode path in f32 and this precision
  std::string cache_dtype;  // set: evaluate through the decode path with this cache
  std::string rope_dtype;   // set: that cache's rope stream in this dtype
  std::vector<std::string> weight_dtypes;  // set: f32 weights against each of these
  int64_t decode_batch = 0;                // decode path: sequences a step (0: kDecodeEvalBatch)
  int64_t stride = 0;  // model folders without a task: window step (0: context / 2)
  int64_t batch = 1;   // and windows per forward pass
};
CLI::App* add_eval_command(CLI::App& app, EvalCommandOptions& options);
int run_eval(const EvalCommandOptions& options, std::ostream& out);

}  // namespace kvlab
