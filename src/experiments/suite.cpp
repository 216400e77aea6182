#include "experiments/suite.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "experiments/run_pool.h"
#include "experiments/run_record.h"
#include "io/atomic_file.h"
#include "io/model_config_json.h"
#include "nn/threads.h"
#include "report/statistics.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

namespace kvlab {

nlohmann::json record_fields(const nlohmann::json& record, const std::vector<std::string>& keys) {
  nlohmann::json fields = nlohmann::json::object();
  for (const std::string& key : keys) fields[key] = record.at(key);
  return fields;
}

std::vector<std::string> variant_labels(const nlohmann::json& results, const std::string& key) {
  std::vector<std::string> labels;
  for (const nlohmann::json& v : results.at("variants"))
    labels.push_back(v.at(key).get<std::string>());
  return labels;
}

std::string dir_name(const std::string& text) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

nlohmann::json read_loss_curve(const std::string& run_dir, int64_t window, const std::string& key) {
  std::ifstream in(run_dir + "/log.jsonl");
  nlohmann::json curve = nlohmann::json::array();
  std::string line;
  double sum = 0;
  int64_t count = 0;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains(key) || !record[key].is_number()) continue;
    sum += record[key].get<double>();
    if (++count == window) {
      curve.push_back({record.value("step", int64_t{0}), sum / static_cast<double>(count)});
      sum = 0;
      count = 0;
    }
  }
  return curve;
}

std::vector<Series> mean_curves(const nlohmann::json& runs, const std::vector<std::string>& labels,
                                const std::string& task) {
  std::vector<Series> out;
  for (const std::string& label : labels) {
    std::map<int64_t, std::vector<double>> by_step;
    for (const nlohmann::json& run : runs) {
      if (run.value("label", "") != label || !run.contains("curve")) continue;
      if (!task.empty() && run.value("task", "") != task) continue;
      for (const nlohmann::json& point : run["curve"]) {
        by_step[point.at(0).get<int64_t>()].push_back(point.at(1).get<double>());
      }
    }
    Series s{label, {}};
    for (const auto& [step, losses] : by_step) {
      s.points.emplace_back(static_cast<double>(step), mean_std(losses).first);
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// A record's metrics: what the run's evaluation measured and what its training cost.
nlohmann::json run_metrics(const train::TrainResult& result) {
  return {{"eval_loss", result.eval.loss},
          {"accuracy", result.eval.accuracy},
          {"perplexity", result.eval.perplexity},
          {"steps", result.step},
          {"seconds", result.seconds},
          {"tokens_per_s", result.tokens_per_s}};
}

// Trains one run afresh in its folder, as one rank of `data_parallel` when given. Returns
// nullopt when stopped; throws naming the folder when the loss diverged.
std::optional<train::TrainResult> train_run(const SuiteRun& run, train::DataParallel* data_parallel,
                                            const std::atomic<bool>* stop) {
  std::error_code ignored;  // every rank clears it
  std::filesystem::remove_all(run.dir, ignored);
  // uptraining starts from a checkpoint's weights, the others from the seed's
  std::unique_ptr<train::Trainer> trainer =
      run.train.init_from.empty()
          ? std::make_unique<train::Trainer>(run.model, data::make_task(run.task_options),
                                             run.train, run.dir)
          : train::Trainer::from_checkpoint(data::make_task(run.task_options), run.train, run.dir);
  trainer->set_data_parallel(data_parallel);
  train::TrainResult result = trainer->run(stop);
  if (result.status == train::TrainResult::Status::kDiverged) {
    throw std::runtime_error(run.dir + ": " + result.message);
  }
  if (result.status != train::TrainResult::Status::kFinished) return std::nullopt;
  return result;
}

}  // namespace

SuiteOutcome run_suite(const Suite& suite, const std::string& out_dir, int requested_jobs,
                       const std::atomic<bool>* stop, std::ostream& progress) {
  const std::unique_ptr<train::DataParallel> data_parallel =
      train::data_parallel_from_environment();
  SuiteOutcome outcome;
  outcome.writer = !data_parallel || data_parallel->rank() == 0;
  outcome.records.resize(suite.runs.size(), nlohmann::json::object());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // every rank of a data-parallel job steps through the same runs in the same order
  const int jobs = data_parallel
                       ? 1
                       : std::max(1, std::min<int>(requested_jobs > 0 ? requested_jobs : cores,
                                                   static_cast<int>(suite.runs.size())));
  nn::set_threads(std::max(1, cores / jobs));
  std::filesystem::create_directories(out_dir);
  const std::string records_path = out_dir + "/records.jsonl";
  const nlohmann::json build = build_record();
  const nlohmann::json machine = machine_record();
  progress << fmt::format("kvlab compare --suite {}: {} runs, {} at a time; records: {}\n",
                          suite.name, suite.runs.size(), jobs, records_path);

  std::mutex mutex;
  size_t done = 0;
  const RunPoolResult pool = run_pool(suite.runs.size(), jobs, stop, [&](size_t i) {
    const SuiteRun& run = suite.runs[i];
    const std::optional<train::TrainResult> trained = train_run(run, data_parallel.get(), stop);
    if (!trained) return false;
    if (!outcome.writer) return true;
    nlohmann::json record = {
        {"suite", suite.name},
        {"preset", suite.preset},
        {"label", run.label},
        {"attn", run.model.attn.to_string()},
        {"task", run.task},
        {"seed", run.seed},
        {"config", run.config},
        {"model", model_config_to_json(run.model)},
        {"train", run.train.to_json()},
        // distilling, the cross-entropy part of the loss: comparable with the other runs'
        {"curve", read_loss_curve(run.dir, std::max<int64_t>(1, run.train.steps / 50),
                                  run.train.distill_from.empty() ? "loss" : "ce")},
        {"build", build},
        {"machine", machine},
        {"threads", std::max(1, cores / jobs)},
        {"processes", data_parallel ? data_parallel->world_size() : 1}};
    record.update(run_metrics(*trained));
    std::lock_guard<std::mutex> lock(mutex);
    append_line(records_path, record.dump());
    outcome.records[i] = std::move(record);
    progress << fmt::format(
        "[{}/{}] {} {} seed {}: validation loss {:.4f}, accuracy {:.4f} ({:.0f} s)\n", ++done,
        suite.runs.size(), run.task, run.label, run.seed, trained->eval.loss,
        trained->eval.accuracy, trained->seconds);
    return true;
  });
  if (!pool.failure.empty()) throw std::runtime_error("a run failed: " + pool.failure);
  outcome.complete = pool.finished == suite.runs.size();
  if (!outcome.complete) {
    progress << fmt::format("kvlab compare: interrupted after {} of {} runs; nothing written\n",
                            pool.finished, suite.runs.size());
  }
  return outcome;
}

train::TrainOptions suite_train_options(int64_t steps, int64_t batch, double lr, int64_t seed) {
  train::TrainOptions t;
  t.steps = steps;
  t.batch = batch;
  t.lr = lr;
  t.warmup = std::min<int64_t>(50, steps / 10);
  t.seed = static_cast<uint64_t>(seed);
  return t;
}

}  // namespace kvlab
