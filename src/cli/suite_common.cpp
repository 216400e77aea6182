#include "cli/suite_common.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <thread>

#include "train/trainer.h"

namespace kvlab {

std::pair<double, double> mean_std(const std::vector<double>& xs) {
  if (xs.empty()) return {NAN, NAN};
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  const double std = xs.size() > 1 ? std::sqrt(var / static_cast<double>(xs.size() - 1)) : 0.0;
  return {mean, std};
}

std::string dir_name(const std::string& text) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

nlohmann::json read_loss_curve(const std::string& run_dir, int64_t window) {
  std::ifstream in(run_dir + "/log.jsonl");
  nlohmann::json curve = nlohmann::json::array();
  std::string line;
  double sum = 0;
  int64_t count = 0;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("loss") || !record["loss"].is_number()) continue;
    sum += record["loss"].get<double>();
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

int machine_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

SuiteLaunch launch_suite(const std::string& out_dir, int requested_jobs, size_t n_runs) {
  SuiteLaunch launch;
  launch.data_parallel = train::data_parallel_from_environment();
  launch.writer = !launch.data_parallel || launch.data_parallel->rank() == 0;
  const int cores = machine_cores();
  launch.jobs = launch.data_parallel
                    ? 1
                    : std::max(1, std::min<int>(requested_jobs > 0 ? requested_jobs : cores,
                                                static_cast<int>(n_runs)));
  train::set_threads(std::max(1, cores / launch.jobs));
  std::filesystem::create_directories(out_dir);
  return launch;
}

bool suite_runs_complete(const RunPoolResult& pool, size_t n_runs) {
  if (!pool.failure.empty()) throw std::runtime_error("a run failed: " + pool.failure);
  if (pool.finished == n_runs) return true;
  std::cerr << fmt::format("kvlab compare: interrupted after {} of {} runs; nothing written\n",
                           pool.finished, n_runs);
  return false;
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

std::optional<train::TrainResult> train_suite_run(
    const ModelConfig& config, const data::TaskOptions& task, const train::TrainOptions& options,
    const std::string& dir, train::DataParallel* data_parallel, const std::atomic<bool>* stop) {
  std::error_code ignored;  // every rank clears it
  std::filesystem::remove_all(dir, ignored);
  train::Trainer trainer(config, data::make_task(task), options, dir);
  trainer.set_data_parallel(data_parallel);
  train::TrainResult result = trainer.run(stop);
  if (result.status == train::TrainResult::Status::kDiverged) {
    throw std::runtime_error(dir + ": " + result.message);
  }
  if (result.status != train::TrainResult::Status::kFinished) return std::nullopt;
  return result;
}

}  // namespace kvlab
