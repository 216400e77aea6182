#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kvlab {

// `kvlab compare`: which suite, which variants, how many seeds, where.
struct CompareOptions {
  std::string suite = "synthetic";
  std::vector<std::string> attn;  // default: the six variants of seed 003's Table 2
  std::string tasks;              // comma list; default all five
  int64_t seeds = 0;              // 0: the suite's default (synthetic 3, lm 2, vision 2)
  std::string preset = "quick";
  std::optional<int64_t> steps;  // overrides the preset (smoke runs)
  // lm, convert: held-out windows each run is scored on (and decoded through every cache
  // dtype), overriding the preset's (smoke runs)
  std::optional<int64_t> eval_windows;
  std::string out;
  int jobs = 0;                          // concurrent runs (0: one per core)
  std::string matmul_precision = "f32";  // lm: the runs' --matmul-precision
  // lm: cache dtypes each checkpoint is also decoded with (held-out text, against bf16)
  std::vector<std::string> cache_dtypes;
  std::string data;  // lm: bible's output (default: run `bible`); vision: Fashion-MNIST folder
  std::optional<int64_t> requests;       // serve: requests a load level, overriding the preset's
  std::vector<std::string> checkpoints;  // serve: trained or converted models (one shape)
  std::string url;                       // serve: a running kvlab server instead
};

// Trains every variant × task × seed (× preset configuration), appends one record per run to
// --out/records.jsonl, writes results.json and results.md to --out and prints the table.
// Returns 130 if interrupted.
int run_compare(const CompareOptions& options, const std::atomic<bool>* stop, std::ostream& out);
int run_compare_lm(const CompareOptions& options, const std::atomic<bool>* stop, std::ostream& out);
int run_compare_vision(const CompareOptions& options, const std::atomic<bool>* stop,
                       std::ostream& out);
int run_compare_convert(const CompareOptions& options, const std::atomic<bool>* stop,
                        std::ostream& out);
int run_compare_serve(const CompareOptions& options, const std::atomic<bool>* stop,
                      std::ostream& out);

// Tables (results.md) and plots of a suite, rebuilt from its results.json alone, into dir.
// Returns the Markdown. Throws SpecError("results") for a document it cannot read.
std::string render_report(const nlohmann::json& results, const std::string& dir);
std::string render_lm_report(const nlohmann::json& results, const std::string& dir);
std::string render_vision_report(const nlohmann::json& results, const std::string& dir);
std::string render_synthetic_report(const nlohmann::json& results, const std::string& dir);
std::string render_convert_report(const nlohmann::json& results, const std::string& dir);
std::string render_serve_report(const nlohmann::json& results, const std::string& dir);

}  // namespace kvlab
