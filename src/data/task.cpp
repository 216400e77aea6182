#include "data/task.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "data/fashion_mnist.h"
#include "data/kjv.h"
#include "io/atomic_file.h"
#include "spec/spec_error.h"

namespace kvlab::data {

std::mt19937_64 stream_rng(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL ^ (stream + 1) * 0xBF58476D1CE4E5B9ULL ^
               (index + 1) * 0x94D049BB133111EBULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return std::mt19937_64(z ^ (z >> 31));
}

namespace {

constexpr uint64_t kTrainStream = 0;
constexpr uint64_t kTestStream = 1;

class SyntheticTask : public Task {
 public:
  SyntheticTask(SyntheticKind kind, int64_t n, int64_t eval_sequences)
      : kind_(kind), n_(n), eval_sequences_(eval_sequences) {}

  std::string name() const override { return std::string(synthetic_name(kind_)); }
  ModelKind model_kind() const override { return ModelKind::kEncoder; }
  int64_t vocab_size() const override { return 10; }
  int64_t seq_len() const override { return n_; }
  Metric metric() const override { return Metric::kAccuracy; }

  Batch train_batch(uint64_t seed, int64_t step, int64_t batch_size) const override {
    std::mt19937_64 rng = stream_rng(seed, kTrainStream, static_cast<uint64_t>(step));
    return make_batch(rng, batch_size);
  }

  std::vector<Batch> eval_batches(uint64_t seed, int64_t batch_size) const override {
    std::vector<Batch> out;
    std::mt19937_64 rng = stream_rng(seed, kTestStream, 0);
    for (int64_t done = 0; done < eval_sequences_; done += batch_size) {
      out.push_back(make_batch(rng, std::min(batch_size, eval_sequences_ - done)));
    }
    return out;
  }

  nlohmann::json to_json() const override {
    return {{"name", name()}, {"seq_len", n_}, {"eval_sequences", eval_sequences_}};
  }

 private:
  Batch make_batch(std::mt19937_64& rng, int64_t batch_size) const {
    torch::Tensor inputs = torch::empty({batch_size, n_}, torch::kInt64);
    torch::Tensor targets = torch::empty({batch_size, n_}, torch::kInt64);
    auto in = inputs.accessor<int64_t, 2>();
    auto out = targets.accessor<int64_t, 2>();
    std::vector<int64_t> row(static_cast<size_t>(n_)), target(static_cast<size_t>(n_));
    for (int64_t b = 0; b < batch_size; ++b) {
      for (auto& digit : row) digit = static_cast<int64_t>(rng() % 10);
      target = row;
      switch (kind_) {
        case SyntheticKind::kReverse:
          std::reverse(target.begin(), target.end());
          break;
        case SyntheticKind::kSort:
          std::sort(target.begin(), target.end());
          break;
        case SyntheticKind::kSub:
          for (auto& digit : target) digit = 9 - digit;
          break;
        case SyntheticKind::kSwap:
          std::rotate(target.begin(), target.begin() + n_ / 2, target.end());
          break;
        case SyntheticKind::kCopy:
          break;
      }
      for (int64_t t = 0; t < n_; ++t) {
        in[b][t] = row[static_cast<size_t>(t)];
        out[b][t] = target[static_cast<size_t>(t)];
      }
    }
    return {inputs, targets};
  }

  SyntheticKind kind_;
  int64_t n_;
  int64_t eval_sequences_;
};

torch::Tensor bytes_tensor(const std::string& bytes) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kInt64);
  int64_t* d = t.data_ptr<int64_t>();
  for (size_t i = 0; i < bytes.size(); ++i) d[i] = static_cast<uint8_t>(bytes[i]);
  return t;
}

// Byte-level causal language modelling: training windows from one text, non-overlapping
// held-out windows from another. "text": a file, its last 5% held out; "kjv": the King James
// Bible split by book (data/kjv.h).
// "crc32:HEX:BYTES" of a text: enough to tell a changed or different corpus from the one a
// checkpoint was trained on.
std::string content_id(const std::string& text) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < text.size();) {
    const size_t n = std::min<size_t>(text.size() - done, size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(text.data() + done), static_cast<uInt>(n));
    done += n;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return "crc32:" + std::string(hex) + ":" + std::to_string(text.size());
}

class TextTask : public Task {
 public:
  TextTask(std::string name, std::string path, int64_t context, int64_t eval_windows,
           const std::string& expected_content)
      : name_(std::move(name)),
        path_(path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string()),
        context_(context),
        eval_windows_(eval_windows) {
    std::string text;
    if (name_ == "kjv") {
      text = read_kjv_text(path_);
    } else {
      try {
        text = read_file(path_, kMaxTextBytes);
      } catch (const std::runtime_error& e) {
        throw SpecError("data", e.what());
      }
    }
    content_ = content_id(text);
    if (!expected_content.empty() && content_ != expected_content) {
      throw SpecError("data", "'" + (path_.empty() ? std::string("bible's output") : path_) +
                                  "' (" + content_ +
                                  ") is not the text this checkpoint was "
                                  "trained on (" +
                                  expected_content +
                                  "); give --data with that file, or --allow-different-data "
                                  "to evaluate on this one");
    }
    std::string train, held_out;
    if (name_ == "kjv") {
      KjvSplit split = split_kjv(text);
      train = std::move(split.train);
      held_out = std::move(split.validation);
    } else {
      train = std::move(text);
      const size_t split = train.size() - train.size() / 20;
      held_out = train.substr(split);
      train.resize(split);
    }
    if (static_cast<int64_t>(held_out.size()) < context_ + 1 ||
        static_cast<int64_t>(train.size()) < context_ + 1) {
      throw SpecError("data", "'" + path_ + "' holds " +
                                  std::to_string(train.size() + held_out.size()) +
                                  " bytes: its held-out part must fit one window of " +
                                  std::to_string(context_ + 1) +
                                  " bytes (use a longer file or a shorter context)");
    }
    train_ = bytes_tensor(train);
    held_out_ = bytes_tensor(held_out);
  }

  std::string name() const override { return name_; }
  ModelKind model_kind() const override { return ModelKind::kDecoder; }
  int64_t vocab_size() const override { return 256; }
  int64_t seq_len() const override { return context_; }
  Metric metric() const override { return Metric::kPerplexity; }

  Batch train_batch(uint64_t seed, int64_t step, int64_t batch_size) const override {
    std::mt19937_64 rng = stream_rng(seed, kTrainStream, static_cast<uint64_t>(step));
    // windows of context + 1
    const uint64_t starts = static_cast<uint64_t>(train_.size(0) - context_);
    std::vector<torch::Tensor> windows;
    for (int64_t b = 0; b < batch_size; ++b) {
      windows.push_back(train_.narrow(0, static_cast<int64_t>(rng() % starts), context_ + 1));
    }
    const torch::Tensor w = torch::stack(windows);
    return {w.narrow(1, 0, context_), w.narrow(1, 1, context_)};
  }

  std::vector<Batch> eval_batches(uint64_t, int64_t batch_size) const override {
    // non-overlapping windows over the held-out text, in order
    std::vector<torch::Tensor> windows;
    const int64_t total = held_out_.size(0);
    for (int64_t start = 0;
         start + context_ + 1 <= total && static_cast<int64_t>(windows.size()) < eval_windows_;
         start += context_) {
      windows.push_back(held_out_.narrow(0, start, context_ + 1));
    }
    std::vector<Batch> out;
    for (size_t i = 0; i < windows.size(); i += static_cast<size_t>(batch_size)) {
      const size_t end = std::min(windows.size(), i + static_cast<size_t>(batch_size));
      const torch::Tensor w = torch::stack(
          std::vector<torch::Tensor>(windows.begin() + static_cast<std::ptrdiff_t>(i),
                                     windows.begin() + static_cast<std::ptrdiff_t>(end)));
      out.push_back({w.narrow(1, 0, context_), w.narrow(1, 1, context_)});
    }
    return out;
  }

  nlohmann::json to_json() const override {
    return {{"name", name_},
            {"seq_len", context_},
            {"eval_sequences", eval_windows_},
            {"data", path_},
            {"data_content", content_}};
  }

 private:
  std::string name_;
  std::string path_;     // absolute; empty for kjv read from the bible program
  std::string content_;  // content_id of the whole text
  int64_t context_;
  int64_t eval_windows_;
  torch::Tensor train_;     // [bytes] int64
  torch::Tensor held_out_;  // [bytes] int64
};

}  // namespace

std::string_view synthetic_name(SyntheticKind kind) {
  switch (kind) {
    case SyntheticKind::kReverse:
      return "reverse";
    case SyntheticKind::kSort:
      return "sort";
    case SyntheticKind::kSub:
      return "sub";
    case SyntheticKind::kSwap:
      return "swap";
    case SyntheticKind::kCopy:
      return "copy";
  }
  return "?";
}

const std::vector<std::string>& synthetic_task_names() {
  static const std::vector<std::string> names = {"reverse", "sort", "sub", "swap", "copy"};
  return names;
}

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {
      "reverse", "sort", "sub", "swap", "copy", "text", "kjv", "fashion-mnist", "set-anomaly"};
  return names;
}

std::unique_ptr<Task> make_task(const TaskOptions& o, const std::string& expected_content) {
  if (o.seq_len <= 0) throw SpecError("seq_len", "must be > 0, got " + std::to_string(o.seq_len));
  if (o.eval_sequences <= 0) throw SpecError("eval_sequences", "must be > 0");
  if (o.name == "text") {
    if (o.data_path.empty()) throw SpecError("data", "the text task needs --data FILE");
    return std::make_unique<TextTask>("text", o.data_path, o.seq_len, o.eval_sequences,
                                      expected_content);
  }
  if (o.name == "kjv") {
    return std::make_unique<TextTask>("kjv", o.data_path, o.seq_len, o.eval_sequences,
                                      expected_content);
  }
  if (o.name == "fashion-mnist") {
    return make_fashion_mnist_task(o.data_path.empty() ? kFashionMnistDir : o.data_path,
                                   o.eval_sequences);
  }
  if (o.name == "set-anomaly") {
    return make_set_anomaly_task(o.data_path.empty() ? kFashionMnistDir : o.data_path,
                                 o.eval_sequences);
  }
  for (SyntheticKind kind : {SyntheticKind::kReverse, SyntheticKind::kSort, SyntheticKind::kSub,
                             SyntheticKind::kSwap, SyntheticKind::kCopy}) {
    if (o.name != synthetic_name(kind)) continue;
    if (kind == SyntheticKind::kSwap && o.seq_len % 2 != 0) {
      throw SpecError("seq_len", "swap exchanges two halves: the length must be even, got " +
                                     std::to_string(o.seq_len));
    }
    if (!o.data_path.empty()) throw SpecError("data", o.name + " is synthetic and reads no file");
    return std::make_unique<SyntheticTask>(kind, o.seq_len, o.eval_sequences);
  }
  std::string known;
  for (const std::string& n : task_names()) known += (known.empty() ? "" : ", ") + n;
  throw SpecError("task", "unknown task '" + o.name + "' (known: " + known + ")");
}

std::unique_ptr<Task> task_from_json(const nlohmann::json& doc, const std::string& data_path,
                                     bool allow_different_data) {
  TaskOptions o;
  std::string expected_content;
  try {
    o.name = doc.at("name").get<std::string>();
    o.seq_len = doc.at("seq_len").get<int64_t>();
    o.eval_sequences = doc.at("eval_sequences").get<int64_t>();
    if (doc.contains("data")) o.data_path = doc.at("data").get<std::string>();
    if (doc.contains("data_content") && !allow_different_data) {
      expected_content = doc.at("data_content").get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw SpecError("task", std::string("malformed task record: ") + e.what());
  }
  if (!data_path.empty()) {
    if (o.name != "text" && o.name != "kjv" && o.name != "fashion-mnist" &&
        o.name != "set-anomaly") {
      throw SpecError("data", "this checkpoint's task " + o.name + " reads no data");
    }
    o.data_path = data_path;
  }
  return make_task(o, expected_content);
}

}  // namespace kvlab::data
