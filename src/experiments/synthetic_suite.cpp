#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "experiments/compare.h"
#include "experiments/suite.h"
#include "io/atomic_file.h"
#include "io/json_document.h"
#include "io/results_json.h"
#include "report/statistics.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"
#include "train/trainer.h"

namespace kvlab {
namespace {

using nlohmann::json;

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

ModelShape encoder_shape(const SuiteConfig& c) {
  // seed 003 Table 1: fixed sinusoidal features, not learned; ten digit tokens
  return ModelShape::encoder(c.n_layers, c.d_model, c.n_heads, /*vocab_size=*/10, c.seq_len);
}

}  // namespace

int run_compare(const CompareOptions& options, const std::atomic<bool>* stop, std::ostream& out) {
  if (options.seeds < 0) throw SpecError("seeds", "must be > 0");
  CompareOptions o = options;
  if (o.seeds == 0) o.seeds = o.suite == "synthetic" ? 3 : 2;
  if (o.steps && *o.steps <= 0) throw SpecError("steps", "must be > 0");
  if (o.eval_windows && *o.eval_windows <= 0) throw SpecError("eval-windows", "must be > 0");
  if (o.jobs < 0) throw SpecError("jobs", "must be >= 0");
  if (o.suite != "synthetic" && !o.tasks.empty()) {
    throw SpecError("tasks",
                    "--tasks picks synthetic tasks; the " + o.suite + " suite runs its own");
  }
  if (o.suite != "lm" && o.matmul_precision != "f32") {
    throw SpecError("matmul-precision",
                    "applies to the lm suite; the " + o.suite + " suite trains at f32");
  }
  if (o.suite != "lm" && o.suite != "serve" && !o.cache_dtypes.empty()) {
    throw SpecError("cache-dtype", "applies to the lm and serve suites; the " + o.suite +
                                       " suite does not decode text");
  }
  if (o.suite != "serve" && o.requests) {
    throw SpecError("requests",
                    "applies to the serve suite; the " + o.suite + " suite serves none");
  }
  if (o.requests && *o.requests <= 0) throw SpecError("requests", "must be > 0");
  if (o.suite != "serve" && !o.url.empty()) {
    throw SpecError("url", "applies to the serve suite; the " + o.suite + " suite serves nothing");
  }
  if (o.suite != "serve" && !o.checkpoints.empty()) {
    throw SpecError("checkpoint",
                    "applies to the serve suite; the " + o.suite + " suite trains its own models");
  }
  if (o.suite != "lm" && o.suite != "convert" && o.eval_windows) {
    throw SpecError("eval-windows", "applies to the lm and convert suites; the " + o.suite +
                                        " suite scores its own held-out set");
  }
  if (o.suite == "lm") return run_compare_lm(o, stop, out);
  if (o.suite == "vision") return run_compare_vision(o, stop, out);
  if (o.suite == "convert") return run_compare_convert(o, stop, out);
  if (o.suite == "serve") return run_compare_serve(o, stop, out);
  if (o.suite != "synthetic") {
    throw SpecError(
        "suite", "unknown suite '" + o.suite + "' (known: synthetic, lm, vision, convert, serve)");
  }
  if (!o.data.empty()) throw SpecError("data", "the synthetic suite reads no data");
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

  Suite suite{"synthetic", o.preset, {}};
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const SuiteConfig& c = configs[ci];
    for (const std::string& task : tasks) {
      for (size_t ai = 0; ai < attns.size(); ++ai) {
        for (int64_t seed = 0; seed < o.seeds; ++seed) {
          suite.runs.push_back({canonical[ai],
                                task,
                                seed,
                                ci,
                                fmt::format("{}/runs/c{}/{}/{}/seed{}", o.out, ci, task,
                                            dir_name(canonical[ai]), seed),
                                ModelConfig::make(encoder_shape(c), canonical[ai], DType::kF32),
                                {task, c.seq_len, 1000, ""},
                                suite_train_options(c.steps, c.batch, c.lr, seed)});
        }
      }
    }
  }
  std::cerr << fmt::format(
      "kvlab compare: {} runs ({} variants × {} tasks × {} seeds × {} configurations)\n",
      suite.runs.size(), attns.size(), tasks.size(), o.seeds, configs.size());
  const SuiteOutcome outcome = run_suite(suite, o.out, o.jobs, stop, std::cerr);
  if (!outcome.complete) return 130;
  if (!outcome.writer) return 0;  // rank 0 reports for the job
  const std::vector<SuiteRun>& runs = suite.runs;
  const std::vector<json>& records = outcome.records;

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
  for (const json& r : records) {
    json run = record_fields(
        r, {"attn", "task", "seed", "config", "accuracy", "steps", "seconds", "label", "curve"});
    run["loss"] = r.at("eval_loss");
    results["runs"].push_back(std::move(run));
  }
  for (const std::string& attn : canonical) {
    std::map<int64_t, std::vector<double>> per_seed;  // seed -> accuracies over tasks and configs
    for (const std::string& task : tasks) {
      std::vector<double> xs;
      for (size_t i = 0; i < runs.size(); ++i) {
        if (runs[i].label != attn || runs[i].task != task) continue;
        const double accuracy = records[i].at("accuracy").get<double>();
        xs.push_back(accuracy);
        per_seed[runs[i].seed].push_back(accuracy);
      }
      const auto [mean, std] = mean_std(xs);
      results["aggregates"].push_back({{"attn", attn},
                                       {"task", task},
                                       {"mean", mean},
                                       {"std", std},
                                       {"n_seeds", o.seeds},
                                       {"n_runs", static_cast<int64_t>(xs.size())}});
    }
    std::vector<double> seed_averages;
    for (const auto& [seed, xs] : per_seed) seed_averages.push_back(mean_std(xs).first);
    const auto [avg, avg_std] = mean_std(seed_averages);
    const auto pa = paper.average.find(attn);
    const ModelConfig m = ModelConfig::make(encoder_shape(configs.front()), attn, DType::kF32);
    results["variants"].push_back(
        {{"attn", attn},
         {"average", avg},
         {"average_std", avg_std},
         {"params", m.param_count().value()},
         {"cached_scalars_per_token", m.attn.cache_layout().scalars_per_token()},
         {"paper_average", pa == paper.average.end() ? json() : json(pa->second)}});
  }
  results["tasks"] = tasks;
  write_file_atomic(o.out + "/results.json", results.dump(2) + "\n");
  out << render_synthetic_report(results, o.out) << "\nwritten: " << o.out << "/results.json, "
      << o.out << "/results.md\n";
  return 0;
}

std::string render_synthetic_report(const json& results, const std::string& dir) {
  const PaperNumbers paper;
  const std::vector<std::string> tasks = results.at("tasks").get<std::vector<std::string>>();
  std::vector<std::string> headers = {"variant"};
  for (const std::string& task : tasks) headers.push_back(task);
  for (const char* h : {"average", "paper avg", "params", "cached/token/layer"})
    headers.push_back(h);
  Table table(headers);
  for (const json& v : results.at("variants")) {
    const std::string attn = v.at("attn");
    std::vector<std::string> row = {attn};
    for (const std::string& task : tasks) {
      std::string cell = "—";
      for (const json& a : results.at("aggregates")) {
        if (a.at("attn") != attn || a.at("task") != task) continue;
        cell =
            fmt::format("{:.3f} ± {:.3f}", a.at("mean").get<double>(), a.at("std").get<double>());
        const auto it = paper.cells.find({attn, task});
        if (it != paper.cells.end()) cell += fmt::format(" ({:.3f})", it->second);
      }
      row.push_back(cell);
    }
    row.push_back(fmt::format("{:.3f} ± {:.3f}", v.at("average").get<double>(),
                              v.at("average_std").get<double>()));
    row.push_back(v.at("paper_average").is_number()
                      ? fmt::format("{:.3f}", v.at("paper_average").get<double>())
                      : "—");
    row.push_back(with_commas(v.at("params").get<int64_t>()));
    row.push_back(std::to_string(v.at("cached_scalars_per_token").get<int64_t>()));
    table.add_row(row);
  }
  const json& c0 = results.at("configs").at(0);
  const size_t n_configs = results.at("configs").size();
  std::string md = fmt::format(
      "# kvlab compare --suite {} --preset {}\n\n"
      "Per-position accuracy on 1,000 held-out sequences per task, mean ± sample std over {} "
      "seed(s){}. Encoder with d {}, {} layers, {} heads, length {}, {} steps of batch {}; "
      "params and cached scalars per token per layer from the spec (a non-causal model caches "
      "nothing; the column shows what a causal model of this variant would). In parentheses: "
      "seed 003 Table 2's reported numbers (averaged there over its whole sweep).\n\n",
      results.value("suite", "synthetic"), results.value("preset", "?"),
      results.at("seeds").get<int64_t>(),
      n_configs > 1 ? fmt::format(" and {} configurations", n_configs) : "",
      c0.at("d_model").get<int64_t>(), c0.at("layers").get<int64_t>(),
      c0.at("heads").get<int64_t>(), c0.at("seq_len").get<int64_t>(), c0.at("steps").get<int64_t>(),
      c0.at("batch").get<int64_t>());
  md += table.to_markdown();
  const std::vector<std::string> labels = variant_labels(results, "attn");
  md += "\nLoss curves (mean over seeds and configurations):";
  for (const std::string& task : tasks) {
    const std::string name = "loss_curves_" + dir_name(task) + ".svg";
    write_file_atomic(dir + "/" + name,
                      svg_line_chart("Training loss on " + task, "step", "training loss (nats)",
                                     mean_curves(results.at("runs"), labels, task)));
    md += " " + name;
  }
  md += "\n";
  write_file_atomic(dir + "/results.md", md);
  return md;
}

std::string render_report(const json& results, const std::string& dir) {
  validate_results_json(results, dir + "/results.json");
  const std::string suite = results.at("suite").get<std::string>();
  try {
    if (suite == "synthetic") return render_synthetic_report(results, dir);
    if (suite == "lm") return render_lm_report(results, dir);
    if (suite == "vision") return render_vision_report(results, dir);
    if (suite == "convert") return render_convert_report(results, dir);
    if (suite == "serve") return render_serve_report(results, dir);
  } catch (const json::exception& e) {
    throw SpecError("results", std::string("malformed results.json: ") + e.what());
  }
  throw SpecError("suite", "unknown suite '" + suite +
                               "' in results.json (synthetic, lm, vision, convert, serve)");
}

}  // namespace kvlab
