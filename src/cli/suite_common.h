#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/svg_plot.h"

namespace kvlab {

// One row of a suite: a label for tables and plots and the attention spec it trains.
struct SuiteVariant {
  std::string label;
  std::string attn;
};

// Mean and sample standard deviation (0 for a single value).
std::pair<double, double> mean_std(const std::vector<double>& xs);

// A folder name for a spec: letters, digits and '-' kept, the rest '_'.
std::string dir_name(const std::string& text);

// Training loss of a run from its log.jsonl, averaged over windows of `window` steps:
// [[step, loss], ...] at each window's last step.
nlohmann::json read_loss_curve(const std::string& run_dir, int64_t window);

// Loss curves of every label, averaged over the runs (seeds) that share it, from
// results["runs"][i]["curve"], as plot series in the order the labels are given.
std::vector<Series> mean_curves(const nlohmann::json& runs, const std::vector<std::string>& labels,
                                const std::string& task = "");

int machine_cores();
// Runs trained at once (requested: 0 = one per core; 1 in a data-parallel job, where every
// rank must step through the same runs in the same order), and sets each run's threads.
int start_jobs(int requested, size_t n_runs, bool data_parallel);

}  // namespace kvlab
