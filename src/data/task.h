#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/model_shape.h"

namespace kvlab::data {

// One batch: inputs and per-position targets, both [B, T] int64.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// What the model kind, vocabulary and metric of a task are.
enum class Metric { kAccuracy, kPerplexity };

// A training task. Batches are pure functions of (seed, step): no hidden stream state, so
// a resumed run sees exactly the batches an uninterrupted one does.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual ModelKind model_kind() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t seq_len() const = 0;
  virtual Metric metric() const = 0;
  virtual Batch train_batch(uint64_t seed, int64_t step, int64_t batch_size) const = 0;
  // The fixed held-out set, in batches of at most `batch_size`.
  virtual std::vector<Batch> eval_batches(uint64_t seed, int64_t batch_size) const = 0;
  // Everything needed to rebuild the task (stored in checkpoints).
  virtual nlohmann::json to_json() const = 0;
};

// Seed 003 §4.1: digits 0–9 of fixed length n; the target is the input reversed, sorted,
// subtracted from 9, with its halves swapped, or copied. Train and test sequences come from
// separate seeded streams.
enum class SyntheticKind { kReverse, kSort, kSub, kSwap, kCopy };
std::string_view synthetic_name(SyntheticKind kind);
const std::vector<std::string>& synthetic_task_names();  // reverse, sort, sub, swap, copy

struct TaskOptions {
  std::string name;               // reverse | sort | sub | swap | copy | text
  int64_t seq_len = 16;           // synthetic length n, or text context
  int64_t eval_sequences = 1000;  // held-out synthetic sequences, or text windows (at most)
  std::string data_path;          // text: the file
};

// Throws SpecError naming the field (task, seq_len, data) for bad options or an unreadable
// or too short data file.
std::unique_ptr<Task> make_task(const TaskOptions& options);
std::unique_ptr<Task> task_from_json(const nlohmann::json& doc);

}  // namespace kvlab::data
