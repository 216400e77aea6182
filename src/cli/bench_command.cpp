#include "cli/bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "nn/transformer.h"
#include "spec/spec_error.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace kvlab {

CLI::App* add_bench_commands(CLI::App& app, BenchTrainOptions& o) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (speed, reported with medians)");
  bench->require_subcommand(1);
  CLI::App* train = bench->add_subcommand(
      "train", "Training tokens/s of a small GPT: forward + backward + AdamW per step");
  train->add_option("--attn", o.attn, "Attention spec")->capture_default_str();
  train->add_option("--d-model", o.d_model, "Model width")->capture_default_str();
  train->add_option("--layers", o.layers, "Layers")->capture_default_str();
  train->add_option("--heads", o.heads, "Heads")->capture_default_str();
  train->add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str();
  train->add_option("--batch", o.batch, "Sequences per step")->capture_default_str();
  train->add_option("--threads", o.threads, "Threads (libtorch and OpenBLAS)")
      ->capture_default_str();
  train->add_option("--steps", o.steps, "Timed steps")->capture_default_str();
  train->add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  train->add_option("--format", o.format, "table | json")->capture_default_str();
  return train;
}

int run_bench_train(const BenchTrainOptions& o, std::ostream& out) {
  if (o.steps <= 0) throw SpecError("steps", "must be > 0");
  if (o.warmup < 0) throw SpecError("warmup", "must be >= 0");
  if (o.batch <= 0 || o.seq_len <= 0) throw SpecError("batch", "batch and seq-len must be > 0");
  if (o.format != "table" && o.format != "json") throw SpecError("format", "table | json");
  if (o.heads <= 0 || o.d_model % o.heads != 0) {
    throw SpecError("heads", "--d-model must be a multiple of --heads");
  }
  const int threads = train::set_threads(o.threads);
  ModelShape s;
  s.kind = ModelKind::kDecoder;
  s.n_layers = o.layers;
  s.d_model = o.d_model;
  s.n_heads = o.heads;
  s.head_dim = o.d_model / o.heads;
  s.mlp_width = 4 * o.d_model;
  s.vocab_size = 256;
  s.max_context = o.seq_len;
  s.tied_embeddings = true;
  const ModelConfig config = ModelConfig::make(s, o.attn, DType::kF32);
  torch::manual_seed(0);
  nn::TransformerModel model(config, torch::kFloat32);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
  train::AdamW optimizer(params, {});
  const torch::Tensor windows = torch::randint(0, 256, {o.batch, o.seq_len + 1});
  const torch::Tensor inputs = windows.narrow(1, 0, o.seq_len);
  const torch::Tensor targets = windows.narrow(1, 1, o.seq_len);
  std::vector<double> seconds;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    const torch::Tensor logits = model->forward(inputs);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    loss.backward();
    optimizer.step(1e-4);
    (void)loss.item<double>();
    const double s_elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= o.warmup) seconds.push_back(s_elapsed);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const double tokens = static_cast<double>(o.batch * o.seq_len);
  if (o.format == "json") {
    out << nlohmann::json{{"attn", config.attn.to_string()},
                          {"d_model", o.d_model},
                          {"layers", o.layers},
                          {"heads", o.heads},
                          {"seq_len", o.seq_len},
                          {"batch", o.batch},
                          {"threads", threads},
                          {"params", model->parameter_count()},
                          {"tokens_per_s", tokens / median},
                          {"step_ms_median", 1e3 * median},
                          {"step_ms_min", 1e3 * seconds.front()},
                          {"step_ms_max", 1e3 * seconds.back()},
                          {"steps", o.steps}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
        "bench train: {} d {} × {} layers × {} heads, seq {} × batch {}, {} "
        "thread(s), {} params\n",
        config.attn.to_string(), o.d_model, o.layers, o.heads, o.seq_len, o.batch, threads,
        model->parameter_count());
    out << fmt::format(
        "{:.0f} tokens/s (step median {:.1f} ms, min {:.1f}, max {:.1f}, {} steps "
        "after {} warm-up)\n",
        tokens / median, 1e3 * median, 1e3 * seconds.front(), 1e3 * seconds.back(), o.steps,
        o.warmup);
  }
  return 0;
}

}  // namespace kvlab
