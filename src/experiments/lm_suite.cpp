// kvlab compare --suite lm: a small GPT on the King James Bible for every attention variant
// of the two seeds (seed 003 §4.2, seed 000 Table 2), same token budget and seeds for all.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <thread>

#include "experiments/compare.h"
#include "experiments/eval_decode.h"
#include "experiments/lm_preset.h"
#include "experiments/suite.h"
#include "infer/generator.h"
#include "io/atomic_file.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "report/statistics.h"
#include "report/svg_plot.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

// Seed 003's projection-sharing family and the baselines, then seed 000 Table 2's GVA rows:
// three M_h inits without a rope stream (keys rebuilt per position) and two DRoPE widths; then
// GVA's two published relatives (Zadouri, Strauss, Dao 2025): GTA, GVA with M_h fixed to a
// channel selection, and GLA, MLA with 2 latent heads.
std::vector<SuiteVariant> default_lm_variants() {
  return {{"mha", "mha"},
          {"qk-v", "qk-v"},
          {"q-kv", "q-kv"},
          {"qkv1", "qkv1"},
          {"gqa:2", "gqa:2"},
          {"mqa", "mqa"},
          {"q-gqa:2", "q-gqa:2"},
          {"q-mqa", "q-mqa"},
          {"mla", "mla"},
          {"gva baseline", "gva:2,dr=0"},
          {"gva scale-matched+qnorm", "gva:2,dr=0,init=scale-matched,qnorm"},
          {"gva variance-fixed", "gva:2,dr=0,init=variance-fixed"},
          {"gva drope 24", "gva:2,dr=24"},
          {"gva drope 16", "gva:2,dr=16"},
          {"gta:2", "gta:2"},
          {"gla:hc=2", "gla:hc=2"}};
}

// Decode speed of a trained checkpoint through the paged cache (bf16) and the raw decode step:
// a random prompt of `context` tokens, then `tokens` greedy steps, each timed. Returns the
// median milliseconds per token.
double decode_ms_per_token(const std::string& checkpoint, int64_t context, int64_t tokens,
                           int threads) {
  nn::TransformerModel model = nn::load_model(checkpoint);
  infer::Generator gen(model, DType::kBf16, context + tokens, 1, threads);
  const int32_t seq = gen.add_sequence();
  std::mt19937_64 rng(7);
  std::vector<int64_t> prompt(static_cast<size_t>(context));
  for (int64_t& t : prompt) t = static_cast<int64_t>(rng() % 256);
  const torch::Tensor prompt_logits = gen.feed(seq, prompt);
  std::vector<float> logits(static_cast<size_t>(gen.vocab_size()));
  int64_t next = infer::greedy_token(prompt_logits.data_ptr<float>(), gen.vocab_size());
  std::vector<double> ms;
  for (int64_t i = 0; i < tokens; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gen.step(&seq, &next, 1, logits.data());
    next = infer::greedy_token(logits.data(), gen.vocab_size());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return median_of(ms);
}

}  // namespace

// quick: 16 variants × 2 seeds, 200 steps, within 30 minutes on 2 cores (2 runs at a time,
// 1 thread each, ~0.4 s a step). base: 6 layers of 256, context 256, 4,000 steps — about 70
// hours for the 32 runs on 2 cores (measured: 4.5 s a step of 8,192 tokens on one thread).
LmPreset lm_preset(const std::string& name) {
  if (name == "quick") return {128, 4, 4, 128, 200, 32, 2e-3, 256, 1024, 32};
  if (name == "base") return {256, 6, 8, 256, 4000, 32, 1e-3, 1000, 4096, 64};
  throw SpecError("preset", "unknown lm preset '" + name + "' (known: quick, base)");
}

ModelShape lm_shape(const LmPreset& p) {
  // bytes; RoPE, which gva and mla need
  return ModelShape::llama_decoder(p.layers, p.d_model, p.heads,
                                   /*mlp_width=*/(8 * p.d_model / 3 + 7) / 8 * 8,
                                   /*vocab_size=*/256, p.seq_len);
}

nlohmann::json lm_config_json(const LmPreset& p) {
  return {{"d_model", p.d_model},
          {"layers", p.layers},
          {"heads", p.heads},
          {"mlp_width", lm_shape(p).mlp_width},
          {"seq_len", p.seq_len},
          {"steps", p.steps},
          {"batch", p.batch},
          {"lr", p.lr},
          {"eval_windows", p.eval_windows}};
}

const std::vector<std::string>& lm_record_keys() {
  static const std::vector<std::string> keys = {"label",        "attn",       "task",  "seed",
                                                "eval_loss",    "perplexity", "steps", "seconds",
                                                "tokens_per_s", "curve"};
  return keys;
}

int run_compare_lm(const CompareOptions& o, const std::atomic<bool>* stop, std::ostream& out) {
  LmPreset preset = lm_preset(o.preset);
  if (o.steps) preset.steps = *o.steps;
  if (o.eval_windows) preset.eval_windows = *o.eval_windows;
  std::vector<SuiteVariant> variants;
  if (o.attn.empty()) {
    variants = default_lm_variants();
  } else {
    for (const std::string& a : o.attn) variants.push_back({a, a});
  }
  const ModelShape shape = lm_shape(preset);
  std::vector<ModelConfig> models;
  for (SuiteVariant& v : variants) {
    try {
      models.push_back(ModelConfig::make(shape, v.attn, DType::kBf16));
    } catch (const SpecError& e) {
      throw SpecError(e.field(), "invalid --attn \"" + v.attn + "\": " + e.what());
    }
    v.attn = models.back().attn.to_string();
    if (models.back().attn.cache_layout().kernel == DecodeKernel::kNone) {
      throw SpecError("attn", v.attn + " keeps no cache: the lm suite decodes every variant");
    }
  }
  // the cache dtypes of the decode-path comparison, bf16 (the reference) first
  std::vector<DType> cache_dtypes;
  if (!o.cache_dtypes.empty()) {
    cache_dtypes.push_back(DType::kBf16);
    for (const std::string& text : o.cache_dtypes) {
      const DType dtype = parse_cache_dtype_flag(text);
      if (std::find(cache_dtypes.begin(), cache_dtypes.end(), dtype) == cache_dtypes.end()) {
        cache_dtypes.push_back(dtype);
      }
    }
  }
  train::TrainOptions train_options = suite_train_options(preset.steps, preset.batch, preset.lr, 0);
  train_options.matmul_precision = o.matmul_precision;
  train_options.validate();  // before anything trains
  const data::TaskOptions task_options{"kjv", preset.seq_len, preset.eval_windows, o.data};
  data::make_task(task_options);  // the text is there and splits, before anything trains
  Suite suite{"lm", o.preset, {}};
  for (size_t v = 0; v < variants.size(); ++v) {
    ModelConfig config = models[v];
    config.attn.cache_dtype = DType::kF32;  // training keeps no cache; bf16 is for decode
    for (int64_t seed = 0; seed < o.seeds; ++seed) {
      suite.runs.push_back(
          {variants[v].label, "kjv", seed, 0,
           fmt::format("{}/runs/{}/seed{}", o.out, dir_name(variants[v].label), seed), config,
           task_options, [&] {
             train::TrainOptions t = train_options;
             t.seed = static_cast<uint64_t>(seed);
             return t;
           }()});
    }
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::cerr << fmt::format(
      "kvlab compare --suite lm: {} runs ({} variants × {} seeds); d {}, {} layers, "
      "{} heads, context {}, {} steps of {} sequences\n",
      suite.runs.size(), variants.size(), o.seeds, preset.d_model, preset.layers, preset.heads,
      preset.seq_len, preset.steps, preset.batch);
  const SuiteOutcome outcome = run_suite(suite, o.out, o.jobs, stop, std::cerr);
  if (!outcome.complete) return 130;
  if (!outcome.writer) return 0;  // rank 0 reports for the job
  json records = json::array();
  for (const json& r : outcome.records) {
    records.push_back(record_fields(r, lm_record_keys()));
  }
  // Decode speed, one variant at a time on every core (runs in parallel would disturb it).
  nn::set_threads(cores);
  json config = lm_config_json(preset);
  config["matmul_precision"] = o.matmul_precision;
  config.update({{"decode_context", preset.decode_context},
                 {"decode_tokens", preset.decode_tokens},
                 {"decode_cache_dtype", "bf16"},
                 {"decode_threads", cores}});
  json results = {{"suite", "lm"},    {"preset", o.preset},        {"seeds", o.seeds},
                  {"config", config}, {"variants", json::array()}, {"runs", records}};
  for (size_t v = 0; v < variants.size(); ++v) {
    if (stop && stop->load()) return 130;
    const std::string checkpoint =
        fmt::format("{}/runs/{}/seed0/checkpoint", o.out, dir_name(variants[v].label));
    const double ms =
        decode_ms_per_token(checkpoint, preset.decode_context, preset.decode_tokens, cores);
    std::cerr << fmt::format("decode {}: {:.2f} ms/token at {} cached tokens\n", variants[v].label,
                             ms, preset.decode_context);
    results["variants"].push_back(
        {{"label", variants[v].label},
         {"attn", variants[v].attn},
         {"params", models[v].param_count().value()},
         {"cache_bytes_per_token", models[v].cache_bytes_per_token().value()},
         {"decode_ms_per_token", ms},
         {"decode_tokens_per_s", 1000.0 / ms}});
  }
  if (!cache_dtypes.empty()) {
    // every checkpoint's held-out windows through each cache, in lockstep with the bf16 one
    std::vector<DecodeSetup> setups;
    for (DType dtype : cache_dtypes) setups.push_back({dtype, AttnPrecision::kF32, {}});
    const auto task = data::make_task(task_options);
    results["config"]["cache_dtypes"] = json::array();
    for (DType dtype : cache_dtypes) results["config"]["cache_dtypes"].push_back(dtype_name(dtype));
    results["cache_dtype_runs"] = json::array();
    for (size_t v = 0; v < variants.size(); ++v) {
      for (int64_t seed = 0; seed < o.seeds; ++seed) {
        if (stop && stop->load()) return 130;
        const std::string checkpoint =
            fmt::format("{}/runs/{}/seed{}/checkpoint", o.out, dir_name(variants[v].label), seed);
        nn::TransformerModel model = nn::load_model(checkpoint);
        const auto start = std::chrono::steady_clock::now();
        const std::vector<DecodeEvalRow> rows =
            eval_decode_setups(model, *task, static_cast<uint64_t>(seed), setups, cores);
        std::cerr << fmt::format(
            "cache dtypes {} seed {}: {:.0f} s\n", variants[v].label, seed,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        for (const DecodeEvalRow& r : rows) {
          json run = decode_eval_json(r);  // against the checkpoint's bf16-cache decode
          run["label"] = variants[v].label;
          run["seed"] = seed;
          results["cache_dtype_runs"].push_back(run);
        }
      }
    }
  }
  write_file_atomic(o.out + "/results.json", results.dump(2) + "\n");
  out << render_report(results, o.out);
  return 0;
}

namespace {

// results.md's variant × cache dtype table and cache_pareto.svg, from results["cache_dtype_runs"]
std::string render_cache_dtypes(const json& results, const std::vector<std::string>& labels,
                                const std::string& dir) {
  const json& runs = results.at("cache_dtype_runs");
  std::vector<std::string> dtypes;
  for (const json& d : results.at("config").at("cache_dtypes")) dtypes.push_back(d);
  Table table({"variant", "cache", "cache B/token", "decode-path perplexity", "Δ ppl vs bf16",
               "KL from bf16 (nats)", "greedy agreement", "seeds"});
  std::vector<Series> series;
  for (const std::string& label : labels) {
    Series line{label, {}};
    for (const std::string& dtype : dtypes) {
      std::vector<double> ppl, change, kl, agreement;
      int64_t bytes = 0;
      for (const json& r : runs) {
        if (r.at("label") != label || r.at("cache_dtype") != dtype) continue;
        ppl.push_back(r.at("perplexity").get<double>());
        change.push_back(100.0 * (r.at("perplexity_vs_reference").get<double>() - 1.0));
        kl.push_back(r.at("kl_from_reference").get<double>());
        agreement.push_back(r.at("greedy_agreement").get<double>());
        bytes = r.at("cache_bytes_per_token").get<int64_t>();
      }
      if (ppl.empty()) continue;
      const auto [p, p_std] = mean_std(ppl);
      const auto [c, c_std] = mean_std(change);
      const auto [k, k_std] = mean_std(kl);
      table.add_row({label, dtype, with_commas(bytes), fmt::format("{:.4f} ± {:.4f}", p, p_std),
                     fmt::format("{:+.3f}% ± {:.3f}", c, c_std),
                     fmt::format("{:.2e} ± {:.1e}", k, k_std),
                     format_percent(mean_std(agreement).first), std::to_string(ppl.size())});
      line.points.push_back({static_cast<double>(bytes), p});
    }
    series.push_back(std::move(line));
  }
  write_file_atomic(dir + "/cache_pareto.svg",
                    svg_line_chart("Decode-path perplexity against cache bytes per token "
                                   "(each line: one variant, one point per cache dtype)",
                                   "cache bytes per token (all layers)",
                                   "perplexity (held-out, mean over seeds)", series));
  return "\n## Cache dtypes\n\nThe held-out windows decoded token by token through each "
         "cache (f32 arithmetic; q8_0/q4_0/fp8 by the scalar kernel), every checkpoint against "
         "its own bf16-cache decode: Δ ppl and KL (mean over positions of KL(bf16 ‖ dtype)) are "
         "mean ± sample std over seeds; rope streams stay bf16. Bytes against quality: "
         "cache_pareto.svg.\n\n" +
         table.to_markdown();
}

}  // namespace

std::string render_lm_report(const json& results, const std::string& dir) {
  const json& c = results.at("config");
  const std::vector<std::string> labels = variant_labels(results, "label");
  auto losses = [&](const std::string& label) {
    std::vector<double> xs;
    for (const json& r : results.at("runs")) {
      if (r.at("label") == label) xs.push_back(r.at("eval_loss").get<double>());
    }
    return xs;
  };
  const double mha_loss = mean_std(losses(labels.empty() ? "" : labels.front())).first;
  auto mean_perplexity = [&](const std::string& label) {
    std::vector<double> ppl;
    for (double x : losses(label)) ppl.push_back(std::exp(x));
    return mean_std(ppl).first;
  };
  const double mha_ppl = mean_perplexity(labels.empty() ? "" : labels.front());
  const std::string first = labels.empty() ? std::string("first") : labels.front();
  Table table({"variant", "attn", "val loss (nats/byte)", "perplexity", "Δ loss vs " + first,
               "Δ ppl vs " + first, "params", "cache B/token", "decode tok/s"});
  for (const json& v : results.at("variants")) {
    const std::string label = v.at("label");
    const std::vector<double> xs = losses(label);
    std::vector<double> ppl;
    for (double x : xs) ppl.push_back(std::exp(x));
    const auto [loss, loss_std] = mean_std(xs);
    const auto [p, p_std] = mean_std(ppl);
    table.add_row({label, v.at("attn"), fmt::format("{:.4f} ± {:.4f}", loss, loss_std),
                   fmt::format("{:.3f} ± {:.3f}", p, p_std),
                   fmt::format("{:+.2f}%", 100.0 * (loss - mha_loss) / mha_loss),
                   fmt::format("{:+.2f}%", 100.0 * (p - mha_ppl) / mha_ppl),
                   with_commas(v.at("params").get<int64_t>()),
                   with_commas(v.at("cache_bytes_per_token").get<int64_t>()),
                   fmt::format("{:.0f}", v.at("decode_tokens_per_s").get<double>())});
  }
  const std::string plot =
      svg_line_chart("Training loss on the King James Bible (mean over seeds)", "step",
                     "training loss (nats/byte)", mean_curves(results.at("runs"), labels));
  write_file_atomic(dir + "/loss_curves.svg", plot);
  std::string md = fmt::format(
      "# kvlab compare --suite lm --preset {}\n\n"
      "Byte-level GPT on the King James Bible (Debian's bible-kjv; every tenth book held out): "
      "d {}, {} layers, {} heads, SwiGLU {}, RoPE, context {}, {} steps of {} sequences (lr {}, "
      "{} matmuls), {} seed(s) per variant, same batches for all. Validation loss over {} "
      "held-out windows, mean ± sample std over seeds; Δ: relative change of the mean loss and of "
      "the mean "
      "perplexity (seed 003 reports the latter). Cache bytes per "
      "token over all layers in bf16. Decode tok/s: greedy decoding of the seed-0 checkpoint "
      "through the paged bf16 cache at {} cached tokens, {} threads (median of {} steps).\n\n",
      results.value("preset", "?"), c.at("d_model").get<int64_t>(), c.at("layers").get<int64_t>(),
      c.at("heads").get<int64_t>(), c.at("mlp_width").get<int64_t>(),
      c.at("seq_len").get<int64_t>(), c.at("steps").get<int64_t>(), c.at("batch").get<int64_t>(),
      c.at("lr").get<double>(), c.value("matmul_precision", std::string("f32")),
      results.at("seeds").get<int64_t>(), c.at("eval_windows").get<int64_t>(),
      c.at("decode_context").get<int64_t>(), c.at("decode_threads").get<int64_t>(),
      c.at("decode_tokens").get<int64_t>());
  md += table.to_markdown() + "\nLoss curves: loss_curves.svg\n";
  if (results.contains("cache_dtype_runs")) md += render_cache_dtypes(results, labels, dir);
  write_file_atomic(dir + "/results.md", md);
  return md;
}

}  // namespace kvlab
