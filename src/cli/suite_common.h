#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/run_pool.h"
#include "cli/svg_plot.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

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

// How a suite trains its runs: the data-parallel group when launched as one (else null),
// whether this process writes the results (rank 0 of a group), and how many runs train at once
// (requested: 0 = one per core; 1 in a data-parallel job, where every rank must step through
// the same runs in the same order). Sets each run's threads and creates the output folder.
struct SuiteLaunch {
  std::unique_ptr<train::DataParallel> data_parallel;
  bool writer = true;
  int jobs = 1;
};
SuiteLaunch launch_suite(const std::string& out_dir, int requested_jobs, size_t n_runs);

// The end of a suite's run pool: throws when a run failed; says that nothing is written and
// returns false when the pool was interrupted before all n_runs finished.
bool suite_runs_complete(const RunPoolResult& pool, size_t n_runs);

// The training options every suite run uses: warm-up of min(50, steps/10), the run's seed.
train::TrainOptions suite_train_options(int64_t steps, int64_t batch, double lr, int64_t seed);

// One run of a suite, trained afresh in `dir` (cleared first: compare owns its folders), as one
// rank of `data_parallel` when given. Returns nullopt when stopped; throws naming the folder
// when the loss diverged.
std::optional<train::TrainResult> train_suite_run(
    const ModelConfig& config, const data::TaskOptions& task, const train::TrainOptions& options,
    const std::string& dir, train::DataParallel* data_parallel, const std::atomic<bool>* stop);

}  // namespace kvlab
