#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "data/task.h"
#include "report/svg_plot.h"
#include "spec/model_config.h"
#include "train/trainer.h"

namespace kvlab {

// One row of a suite: a label for tables and plots and the attention spec it trains.
struct SuiteVariant {
  std::string label;
  std::string attn;
};

// One cell of a suite: a variant trained on a task with a seed under one configuration, in
// its own folder.
struct SuiteRun {
  std::string label;  // the variant's name in tables and plots
  std::string task;
  int64_t seed = 0;
  size_t config = 0;  // index of the suite's configuration
  std::string dir;
  ModelConfig model;
  data::TaskOptions task_options;
  train::TrainOptions train;
};

// A comparison as a library object: variants × tasks × seeds × configurations, each cell one
// training run. Each suite (synthetic, lm, vision) builds one from its preset; run_suite trains it.
struct Suite {
  std::string name;    // synthetic | lm | vision
  std::string preset;  // the preset its configurations come from
  std::vector<SuiteRun> runs;
};

// What run_suite leaves: whether every run finished, whether this process writes the results
// (rank 0 of a `kvlab launch` group, or the only process), and one record per run (in the
// suite's order; empty objects where this process does not write).
struct SuiteOutcome {
  bool complete = false;
  bool writer = true;
  std::vector<nlohmann::json> records;
};

// Trains every run of `suite` afresh (each folder cleared first: compare owns its folders),
// `requested_jobs` at a time (0: one per core; one at a time, every rank in step, under
// `kvlab launch`), with the cores shared among the concurrent runs. Each finished run's record —
// label, spec, task, seed, configuration, metrics, loss curve, the build and the machine — is
// appended to OUT/records.jsonl as it lands and printed as one line of `progress`. Throws when a
// run fails or diverges; returns complete == false (and says so) when `stop` interrupts it.
SuiteOutcome run_suite(const Suite& suite, const std::string& out_dir, int requested_jobs,
                       const std::atomic<bool>* stop, std::ostream& progress);

// The named fields of a run's record (each must be there), as a suite's results.json lists it.
nlohmann::json record_fields(const nlohmann::json& record, const std::vector<std::string>& keys);

// The variants a results.json lists, in its order: each one's `key` ("label", or "attn").
std::vector<std::string> variant_labels(const nlohmann::json& results, const std::string& key);

// The training options every suite run uses: warm-up of min(50, steps/10), the run's seed.
train::TrainOptions suite_train_options(int64_t steps, int64_t batch, double lr, int64_t seed);

// A folder name for a spec: letters, digits and '-' kept, the rest '_'.
std::string dir_name(const std::string& text);

// Training loss of a run from its log.jsonl (the records' `key`), averaged over windows of
// `window` steps: [[step, loss], ...] at each window's last step.
nlohmann::json read_loss_curve(const std::string& run_dir, int64_t window,
                               const std::string& key = "loss");

// Loss curves of every label, averaged over the runs (seeds) that share it, from
// results["runs"][i]["curve"], as plot series in the order the labels are given.
std::vector<Series> mean_curves(const nlohmann::json& runs, const std::vector<std::string>& labels,
                                const std::string& task = "");

}  // namespace kvlab
