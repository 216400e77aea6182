#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "spec/model_shape.h"

namespace kvlab::data {

// One batch: inputs (tokens [B, T] int64, images [B, 1, 28, 28] or sets [B, N, F] float) and
// targets (per position [B, T], per image or per set [B], int64).
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
  // Sets the input-side fields of a model for this task (image side, patch, classes, set
  // element width, positions where the task dictates them).
  virtual void configure_model(ModelShape& /*shape*/) const {}
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
  std::string
      name;  // reverse | sort | sub | swap | copy | text | kjv | fashion-mnist | set-anomaly
  int64_t seq_len = 16;           // synthetic length n, or text context
  int64_t eval_sequences = 1000;  // held-out sequences, text windows, images or sets (at most)
  std::string data_path;          // text: the file; kjv: bible's output (default: run `bible`);
                                  // fashion-mnist, set-anomaly: the folder (default: Debian's)
};
const std::vector<std::string>& task_names();

// Fashion-MNIST tasks (image_tasks.cpp).
std::unique_ptr<Task> make_fashion_mnist_task(const std::string& dir, int64_t eval_images);
// Seed 003 A.3.2: sets of 10 images, 9 of one class and 1 of another at a random position;
// the target is the odd one's index. No positions: the set model is permutation-equivariant.
std::unique_ptr<Task> make_set_anomaly_task(const std::string& dir, int64_t eval_sets);
// Independent, reproducible random streams: one generator per (seed, stream, index).
std::mt19937_64 stream_rng(uint64_t seed, uint64_t stream, uint64_t index);

// Throws SpecError naming the field (task, seq_len, data) for bad options or an unreadable
// or too short data file. `expected_content` (text, kjv): the content a checkpoint was
// trained on ("crc32:HEX:BYTES", as to_json records it); a text whose content differs is
// refused. Empty: any content.
std::unique_ptr<Task> make_task(const TaskOptions& options,
                                const std::string& expected_content = "");
// A task as a checkpoint recorded it. `data_path`, when not empty, replaces the recorded data
// file (a moved corpus); a text task whose content differs from the recorded one is refused
// unless `allow_different_data`.
std::unique_ptr<Task> task_from_json(const nlohmann::json& doc, const std::string& data_path = "",
                                     bool allow_different_data = false);

// Text files a text task reads: at most this many bytes (each byte becomes an int64 token).
inline constexpr uint64_t kMaxTextBytes = uint64_t{512} << 20;

}  // namespace kvlab::data
