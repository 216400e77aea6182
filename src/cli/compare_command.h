#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kvlab {

struct CompareOptions {
  std::string suite = "synthetic";
  std::vector<std::string> attn;  // default: the six variants of seed 003's Table 2
  std::string tasks;              // comma list; default all five
  int64_t seeds = 3;
  std::string preset = "quick";
  std::optional<int64_t> steps;  // overrides the preset (smoke runs)
  std::string out;
  int jobs = 0;  // concurrent runs (0: one per core)
};

CLI::App* add_compare_command(CLI::App& app, CompareOptions& options);
// Trains every variant × task × seed (× preset configuration), writes results.json and
// results.md to --out and prints the table. Returns 130 if interrupted.
int run_compare(const CompareOptions& options, const std::atomic<bool>* stop, std::ostream& out);

}  // namespace kvlab
