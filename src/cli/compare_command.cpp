#include "cli/compare_command.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/table.h"
#include "cli/units.h"
#include "io/atomic_file.h"
#include "spec/spec_error.h"
#include "train/trainer.h"

namespace kvlab {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// One model and training configuration of a preset.
struct SuiteConfig {
  int64_t d_model, n_layers, n_heads, seq_len, steps, batch;
  double lr;
};

// quick: one configuration that 2 cores train for all 90 default runs within 10 minutes.
// paper: seed 003 §4.1's sweep — d 32/64/256, layers 2/4, heads 2/4, lengths 16/64/128,
// two epochs of 50,000 sequences at batch 128 (the paper does not state its epoch size).
std::vector<SuiteConfig> preset_configs(const std::string& preset) {
  if (preset == "quick") return {{64, 2, 4, 32, 400, 64, 2e-3}};
  if (preset == "paper") {
    std::vector<SuiteConfig> configs;
    for (int64_t d : {32, 64, 256}) {
      for (int64_t layers : {2, 4}) {
        for (int64_t heads : {2, 4}) {
          for (int64_t n : {16, 64, 128}) {
            configs.push_back({d, layers, heads, n, 2 * 50000 / 128, 128, 1e-3});
          }
        }
      }
    }
    return configs;
  }
  throw SpecError("preset", "unknown preset '" + preset + "' (known: quick, paper)");
}

// Seed 003 Table 2 as quoted in DESIGN.md: average accuracy of the six variants, and the
// Reverse / Swap cells the text gives.
struct PaperNumbers {
  std::map<std::string, double> average = {{"mha", 0.758},  {"q-kv", 0.751},  {"qk-v", 0.724},
                                           {"qkv1", 0.651}, {"qk-v+", 0.761}, {"qkv1+", 0.700}};
  std::map<std::pair<std::string, std::string>, double> cells = {{{"mha", "reverse"}, 0.529},
                                                                 {{"qkv1", "reverse"}, 0.295},
                                                                 {{"mha", "swap"}, 0.524},
                                                                 {{"qkv1", "swap"}, 0.307}};
};

struct RunSpec {
  size_t config_index;
  std::string attn;
  std::string task;
  int64_t seed;
  std::string dir;
};

struct RunOutcome {
  double accuracy = 0;
  double loss = 0;
  double seconds = 0;
  int64_t steps = 0;
  bool done = false;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find(',', start);
    const std::string item =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string dir_name(const std::string& attn) {
  std::string out;
  for (char c : attn) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
  return out;
}

std::pair<double, double> mean_std(const std::vector<double>& xs) {
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  const double std = xs.size() > 1 ? std::sqrt(var / static_cast<double>(xs.size() - 1)) : 0.0;
  return {mean, std};
}

ModelShape encoder_shape(const SuiteConfig& c) {
  ModelShape s;
  s.kind = ModelKind::kEncoder;
  s.n_layers = c.n_layers;
  s.d_model = c.d_model;
  s.n_heads = c.n_heads;
  s.head_dim = c.d_model / c.n_heads;
  s.mlp_width = 4 * c.d_model;
  s.mlp_kind = MlpKind::kGelu;
  s.vocab_size = 10;
  s.max_context = c.seq_len;
  s.norm = NormKind::kLayerNorm;
  s.bias = BiasKind::kAll;
  s.tied_embeddings = false;
  s.pos = PosScheme::kSinusoidal;  // seed 003 Table 1: fixed sinusoidal features, not learned
  return s;
}

}  // namespace

CLI::App* add_compare_command(CLI::App& app, CompareOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Train every attention variant on every task for every seed and compare their quality "
      "side by side (mean ± std over seeds), next to the seeds' reported numbers.");
  cmd->add_option("--suite", o.suite, "synthetic (seed 003 §4.1: reverse, sort, sub, swap, copy)")
      ->capture_default_str();
  cmd->add_option("--attn", o.attn,
                  "Attention spec, repeatable (default: mha, q-kv, qk-v, qkv1, qk-v+, qkv1+)");
  cmd->add_option("--tasks", o.tasks, "Comma list of tasks (default: all five)");
  cmd->add_option("--seeds", o.seeds, "Seeds per variant and task")->capture_default_str();
  cmd->add_option("--preset", o.preset,
                  "quick (one configuration, ~10 minutes on 2 cores) | paper (seed 003's sweep, "
                  "days on 2 cores)")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "Optimizer steps per run, overriding the preset");
  cmd->add_option("--out", o.out, "Folder for results.json, results.md and runs/")->required();
  cmd->add_option("--jobs", o.jobs, "Runs trained at once (0: one per core)")
      ->capture_default_str();
  return cmd;
}

int run_compare(const CompareOptions& o, const std::atomic<bool>* stop, std::ostream& out) {
  if (o.suite != "synthetic") {
    throw SpecError("suite", "unknown suite '" + o.suite + "' (known: synthetic)");
  }
  if (o.seeds <= 0) throw SpecError("seeds", "must be > 0");
  if (o.steps && *o.steps <= 0) throw SpecError("steps", "must be > 0");
  if (o.jobs < 0) throw SpecError("jobs", "must be >= 0");
  std::vector<SuiteConfig> configs = preset_configs(o.preset);
  if (o.steps) {
    for (SuiteConfig& c : configs) c.steps = *o.steps;
  }
  const std::vector<std::string> attns =
      o.attn.empty() ? std::vector<std::string>{"mha", "q-kv", "qk-v", "qkv1", "qk-v+", "qkv1+"}
                     : o.attn;
  const std::vector<std::string> tasks =
      o.tasks.empty() ? data::synthetic_task_names() : split_list(o.tasks);
  if (tasks.empty()) throw SpecError("tasks", "no task given");

  // Validate every combination before training anything.
  std::vector<std::string> canonical;
  for (const std::string& attn : attns) {
    for (const SuiteConfig& c : configs) {
      try {
        const ModelConfig m = ModelConfig::make(encoder_shape(c), attn, DType::kF32);
        if (&c == &configs.front()) canonical.push_back(m.attn.to_string());
      } catch (const SpecError& e) {
        throw SpecError(e.field(), "invalid --attn \"" + attn + "\": " + e.what());
      }
    }
  }
  for (const std::string& task : tasks) {
    for (const SuiteConfig& c : configs) {
      data::make_task({task, c.seq_len, 1000, ""});
    }
  }

  std::vector<RunSpec> runs;
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    for (const std::string& task : tasks) {
      for (size_t ai = 0; ai < attns.size(); ++ai) {
        for (int64_t seed = 0; seed < o.seeds; ++seed) {
          runs.push_back({ci, canonical[ai], task, seed,
                          fmt::format("{}/runs/c{}/{}/{}/seed{}", o.out, ci, task,
                                      dir_name(canonical[ai]), seed)});
        }
      }
    }
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs =
      std::max(1, std::min<int>(o.jobs > 0 ? o.jobs : cores, static_cast<int>(runs.size())));
  train::set_threads(std::max(1, cores / jobs));
  fs::create_directories(o.out);
  std::cerr << fmt::format(
      "kvlab compare: {} runs ({} variants × {} tasks × {} seeds × {} "
      "configurations), {} at a time\n",
      runs.size(), attns.size(), tasks.size(), o.seeds, configs.size(), jobs);

  std::vector<RunOutcome> outcomes(runs.size());
  std::mutex mutex;
  size_t next = 0, finished = 0;
  std::string failure;
  auto worker = [&] {
    while (true) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next >= runs.size() || !failure.empty() || (stop && stop->load())) return;
        i = next++;
      }
      const RunSpec& r = runs[i];
      const SuiteConfig& c = configs[r.config_index];
      try {
        fs::remove_all(r.dir);  // compare owns its folder: a rerun starts each run afresh
        train::TrainOptions t;
        t.steps = c.steps;
        t.batch = c.batch;
        t.lr = c.lr;
        t.warmup = std::min<int64_t>(50, c.steps / 10);
        t.seed = static_cast<uint64_t>(r.seed);
        train::Trainer trainer(ModelConfig::make(encoder_shape(c), r.attn, DType::kF32),
                               data::make_task({r.task, c.seq_len, 1000, ""}), t, r.dir);
        const train::TrainResult result = trainer.run(stop);
        std::lock_guard<std::mutex> lock(mutex);
        if (result.status == train::TrainResult::Status::kFinished) {
          outcomes[i] = {result.eval.accuracy, result.eval.loss, result.seconds, result.step, true};
          ++finished;
          std::cerr << fmt::format("[{}/{}] {} {} seed {}: accuracy {:.3f} ({:.1f} s)\n", finished,
                                   runs.size(), r.task, r.attn, r.seed, result.eval.accuracy,
                                   result.seconds);
        } else if (result.status == train::TrainResult::Status::kDiverged && failure.empty()) {
          failure = r.dir + ": " + result.message;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (failure.empty()) failure = r.dir + ": " + e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (!failure.empty()) throw std::runtime_error("a run failed: " + failure);
  if (finished < runs.size()) {
    std::cerr << fmt::format("kvlab compare: interrupted after {} of {} runs; nothing written\n",
                             finished, runs.size());
    return 130;
  }

  // Aggregate: per (variant, task) over every configuration and seed.
  const PaperNumbers paper;
  json results = {{"suite", o.suite},         {"preset", o.preset},
                  {"seeds", o.seeds},         {"configs", json::array()},
                  {"runs", json::array()},    {"aggregates", json::array()},
                  {"variants", json::array()}};
  for (const SuiteConfig& c : configs) {
    results["configs"].push_back({{"d_model", c.d_model},
                                  {"layers", c.n_layers},
                                  {"heads", c.n_heads},
                                  {"seq_len", c.seq_len},
                                  {"steps", c.steps},
                                  {"batch", c.batch},
                                  {"lr", c.lr}});
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    results["runs"].push_back({{"attn", runs[i].attn},
                               {"task", runs[i].task},
                               {"seed", runs[i].seed},
                               {"config", runs[i].config_index},
                               {"accuracy", outcomes[i].accuracy},
                               {"loss", outcomes[i].loss},
                               {"steps", outcomes[i].steps},
                               {"seconds", outcomes[i].seconds}});
  }
  std::vector<std::string> headers = {"variant"};
  for (const std::string& task : tasks) headers.push_back(task);
  for (const char* h : {"average", "paper avg", "params", "cached/token/layer"})
    headers.push_back(h);
  Table table(headers);
  for (const std::string& attn : canonical) {
    std::vector<std::string> row = {attn};
    std::map<int64_t, std::vector<double>> per_seed;  // seed -> accuracies over tasks and configs
    for (const std::string& task : tasks) {
      std::vector<double> xs;
      for (size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].attn != attn || runs[i].task != task) continue;
        xs.push_back(outcomes[i].accuracy);
        per_seed[runs[i].seed].push_back(outcomes[i].accuracy);
      }
      const auto [mean, std] = mean_std(xs);
      results["aggregates"].push_back({{"attn", attn},
                                       {"task", task},
                                       {"mean", mean},
                                       {"std", std},
                                       {"n_seeds", o.seeds},
                                       {"n_runs", static_cast<int64_t>(xs.size())}});
      std::string cell = fmt::format("{:.3f} ± {:.3f}", mean, std);
      const auto it = paper.cells.find({attn, task});
      if (it != paper.cells.end()) cell += fmt::format(" ({:.3f})", it->second);
      row.push_back(cell);
    }
    std::vector<double> seed_averages;
    for (const auto& [seed, xs] : per_seed) seed_averages.push_back(mean_std(xs).first);
    const auto [avg, avg_std] = mean_std(seed_averages);
    row.push_back(fmt::format("{:.3f} ± {:.3f}", avg, avg_std));
    const auto pa = paper.average.find(attn);
    row.push_back(pa == paper.average.end() ? "—" : fmt::format("{:.3f}", pa->second));
    const ModelConfig m = ModelConfig::make(encoder_shape(configs.front()), attn, DType::kF32);
    row.push_back(with_commas(m.param_count().value()));
    row.push_back(std::to_string(m.attn.cache_layout().scalars_per_token()));
    results["variants"].push_back(
        {{"attn", attn},
         {"average", avg},
         {"average_std", avg_std},
         {"params", m.param_count().value()},
         {"cached_scalars_per_token", m.attn.cache_layout().scalars_per_token()},
         {"paper_average", pa == paper.average.end() ? json() : json(pa->second)}});
    table.add_row(row);
  }
  const SuiteConfig& c0 = configs.front();
  std::string md = fmt::format(
      "# kvlab compare --suite {} --preset {}\n\n"
      "Per-position accuracy on 1,000 held-out sequences per task, mean ± sample std over {} "
      "seed(s){}. Encoder with d {}, {} layers, {} heads, length {}, {} steps of batch {}; "
      "params and cached scalars per token per layer from the spec (a non-causal model caches "
      "nothing; the column shows what a causal model of this variant would). In parentheses: "
      "seed 003 Table 2's reported numbers (averaged there over its whole sweep).\n\n",
      o.suite, o.preset, o.seeds,
      configs.size() > 1 ? fmt::format(" and {} configurations", configs.size()) : "", c0.d_model,
      c0.n_layers, c0.n_heads, c0.seq_len, c0.steps, c0.batch);
  md += table.to_markdown();
  write_file_atomic(o.out + "/results.json", results.dump(2) + "\n");
  write_file_atomic(o.out + "/results.md", md);
  out << md << "\nwritten: " << o.out << "/results.json, " << o.out << "/results.md\n";
  return 0;
}

}  // namespace kvlab
