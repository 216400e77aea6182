// `kvlab compare --suite serve`: how many sequences each attention variant's cache holds at one KV
// memory budget, and the throughput and latency the serving engine gives with them.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "experiments/compare.h"
#include "experiments/step_ceilings.h"
#include "io/atomic_file.h"
#include "kernels/compute_peak.h"
#include "kernels/decode_attention.h"
#include "kernels/fast_decoder.h"
#include "kernels/matvec.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "nn/transformer.h"
#include "report/svg_plot.h"
#include "report/table.h"
#include "report/units.h"
#include "serve/engine.h"
#include "serve/kv_budget.h"
#include "serve/load_generator.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

using nlohmann::json;

// quick: a 4-layer, d 256, 8-head Llama-style model with random weights (the numbers that matter
// here are bytes and steps, not what the model says), requests of 64 prompt and 32 generated
// tokens, a KV budget that holds 4 such requests of mha's cache.
struct ServePreset {
  int64_t layers, d_model, heads;
  int64_t prompt_len, output_len;
  int64_t budget_mha_requests;  // the budget: mha's cache of this many requests
  int64_t requests;             // per load level
  int64_t max_num_seqs;
};

ServePreset serve_preset(const std::string& name) {
  if (name == "quick") return {4, 256, 8, 64, 32, 4, 48, 64};
  throw SpecError("preset", "unknown serve preset '" + name + "' (known: quick)");
}

struct ServeVariant {
  ServeVariant(std::string label_, std::string attn_, DType cache_dtype_ = DType::kBf16,
               std::string checkpoint_ = "")
      : label(std::move(label_)),
        attn(std::move(attn_)),
        cache_dtype(cache_dtype_),
        checkpoint(std::move(checkpoint_)) {}
  std::string label, attn;
  DType cache_dtype;
  std::string checkpoint;  // "": random weights of the preset's shape
};

std::vector<ServeVariant> default_serve_variants() {
  return {{"mha", "mha"},
          {"gqa:2", "gqa:2"},
          {"mqa", "mqa"},
          {"q-gqa:2", "q-gqa:2"},
          {"q-kv", "q-kv"},
          {"gva:2,dr=16", "gva:2,dr=16"},
          {"gva:2,dr=0", "gva:2,dr=0"},
          {"gta:2,dr=16", "gta:2,dr=16"},
          {"mla:dc=64,dr=16", "mla:dc=64,dr=16"},
          {"gla:hc=2,dc=32", "gla:hc=2,dc=32"},
          {"gqa:2 q8_0", "gqa:2", DType::kQ8_0},
          {"gva:2,dr=16 q8_0", "gva:2,dr=16", DType::kQ8_0}};
}

// The offered loads, as fractions of the slowest variant's saturated request rate (the same
// absolute rates for every variant); latencies are compared at kFixedRateFraction.
constexpr double kLoadFractions[] = {0.25, 0.5, 1.0, 2.0};
constexpr double kFixedRateFraction = 0.5;

ModelConfig serve_model(const ServePreset& p, const std::string& attn) {
  ModelShape s = ModelShape::llama_decoder(p.layers, p.d_model, p.heads,
                                           /*mlp_width=*/(8 * p.d_model / 3 + 7) / 8 * 8,
                                           /*vocab_size=*/256, p.prompt_len + p.output_len);
  s.validate();
  try {
    return ModelConfig::make(s, attn, DType::kF32);
  } catch (const SpecError& e) {
    throw SpecError(e.field(), "invalid --attn \"" + attn + "\": " + e.what());
  }
}

// One load level's outcome: requests arriving as a Poisson process at `rate` (infinite: all at
// once), every one generating exactly output_len tokens.
struct LoadLevel {
  double rate = 0;  // offered requests/s
  double duration_s = 0;
  double request_throughput = 0, output_throughput = 0;
  serve::Percentiles ttft_ms, tpot_ms;
  int64_t peak_running = 0, preemptions = 0;
  // where the time went: steps that ran prompt tokens, and steps of decode tokens alone (their
  // count and the sequences they decoded)
  double prompt_steps_s = 0, decode_steps_s = 0;
  int64_t decode_steps = 0, decoded = 0;
};

// Drives the engine in this thread: submits each request at its arrival time, steps while any
// runs, and times each token at the end of the step that made it. Nothing once *stop turns true.
std::optional<LoadLevel> drive(serve::Engine& engine,
                               const std::vector<std::vector<int64_t>>& prompts, int64_t output_len,
                               double rate, uint64_t seed, const std::atomic<bool>* stop) {
  const size_t n = prompts.size();
  std::vector<double> arrival(n, 0.0);
  if (std::isfinite(rate)) {
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(rate);
    double t = 0;
    for (double& a : arrival) a = t += gap(rng);
  }
  struct Timing {
    double first_s = -1, last_s = 0;
    int64_t tokens = 0;
  };
  std::vector<Timing> timing(n);
  std::vector<double> ttft_ms, tpot_ms;
  LoadLevel level;
  level.rate = rate;
  const int64_t preemptions_before = engine.scheduler().preemptions();
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  size_t next = 0, done = 0;
  double last_end_s = 0;
  while (done < n) {
    if (stop != nullptr && stop->load()) return std::nullopt;
    const double now_s = elapsed();
    for (; next < n && arrival[next] <= now_s; ++next) {
      serve::RequestLimits limits;
      limits.max_tokens = output_len;
      engine.submit(static_cast<serve::RequestId>(next + 1), prompts[next], limits, {}, 0);
    }
    if (engine.idle()) {  // nothing runs until the next arrival
      if (next == n)
        throw std::runtime_error("serve suite: the engine went idle with requests left");
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(arrival[next])));
      continue;
    }
    const double begin_s = elapsed();
    const serve::StepResult step = engine.step();
    const double end_s = elapsed();
    if (step.computed_tokens > static_cast<int64_t>(step.events.size())) {
      level.prompt_steps_s += end_s - begin_s;
    } else {
      level.decode_steps_s += end_s - begin_s;
      ++level.decode_steps;
      level.decoded += static_cast<int64_t>(step.events.size());
    }
    level.peak_running = std::max(level.peak_running, engine.scheduler().n_running());
    if (!step.cancelled.empty()) {
      throw std::runtime_error("serve suite: the engine cancelled a request it was not asked to");
    }
    for (const serve::TokenEvent& event : step.events) {
      const size_t i = static_cast<size_t>(event.id - 1);
      Timing& t = timing[i];
      if (t.first_s < 0) t.first_s = end_s;
      t.last_s = end_s;
      ++t.tokens;
      if (event.finished) {
        ++done;
        last_end_s = end_s;
        ttft_ms.push_back(1e3 * (t.first_s - arrival[i]));
        if (t.tokens > 1) {
          tpot_ms.push_back(1e3 * (t.last_s - t.first_s) / static_cast<double>(t.tokens - 1));
        }
        if (t.tokens != output_len) {
          throw std::runtime_error(
              fmt::format("serve suite: request {} ended after {} of {} tokens", event.id, t.tokens,
                          output_len));
        }
      }
    }
  }
  level.duration_s = last_end_s;
  level.request_throughput = static_cast<double>(n) / last_end_s;
  level.output_throughput = static_cast<double>(n * static_cast<size_t>(output_len)) / last_end_s;
  level.ttft_ms = serve::percentiles(ttft_ms);
  level.tpot_ms = serve::percentiles(tpot_ms);
  level.preemptions = engine.scheduler().preemptions() - preemptions_before;
  return level;
}

// Ctrl-C: what `kvlab compare` returns when a suite stops early (nothing written).
int interrupted(std::ostream& out) {
  out << "kvlab compare --suite serve: interrupted; no results written\n";
  return 130;
}

json percentiles_json(const serve::Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.median}, {"p99", p.p99}};
}

// One offered load's entry in results.json, and the fixed rate's latencies in a row: in-process
// and --url alike (peak and preemptions null where unknown).
json load_entry(const std::string& label, double offered_rate, double request_throughput,
                double output_throughput, const serve::Percentiles& ttft_ms,
                const serve::Percentiles& tpot_ms, const json& peak_running,
                const json& preemptions) {
  return {{"label", label},
          {"offered_rate", offered_rate},
          {"request_throughput", request_throughput},
          {"output_throughput", output_throughput},
          {"ttft_ms", percentiles_json(ttft_ms)},
          {"tpot_ms", percentiles_json(tpot_ms)},
          {"peak_running", peak_running},
          {"preemptions", preemptions}};
}

json fixed_rate_json(const json& load) {
  return {{"ttft_ms", load.at("ttft_ms")},
          {"tpot_ms", load.at("tpot_ms")},
          {"preemptions", load.at("preemptions")}};
}

std::string sentence_start(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

// `--url`: the one model a running `kvlab serve` serves (its GET /info gives the cache
// arithmetic), loaded through `kvlab bench serve`'s client at the same levels as in-process,
// timed at the client; its /metrics give the sequences it ran and its preemptions. Where the
// server's time goes and the roofline are not known over HTTP: null.
int run_compare_serve_url(const CompareOptions& o, const ServePreset& preset,
                          const std::atomic<bool>* stop, std::ostream& out) {
  if (!o.attn.empty() || !o.checkpoints.empty() || !o.cache_dtypes.empty()) {
    throw SpecError("url",
                    "a server serves its own model: give --url alone, without --attn, "
                    "--checkpoint or --cache-dtype");
  }
  serve::LoadOptions load;
  load.url = o.url;
  load.num_prompts = preset.requests;
  load.input_len = preset.prompt_len;
  load.output_len = preset.output_len;
  const json info = json::parse(serve::get_text(load, "/info"), nullptr, false);
  if (!info.is_object() || !info.contains("bytes_per_token") || !info.contains("attn")) {
    throw SpecError("url", o.url + " answers GET /info without a kvlab server's cache arithmetic");
  }
  const auto field = [&](const char* key) {
    if (!info.contains(key) || !info[key].is_number()) {
      throw SpecError("url", o.url + "'s /info has no number '" + key + "'");
    }
    return info[key];
  };
  if (field("max_model_len").get<int64_t>() < preset.prompt_len + preset.output_len) {
    throw SpecError("url", o.url + " serves at most " + field("max_model_len").dump() +
                               " tokens a request; the suite's need " +
                               std::to_string(preset.prompt_len + preset.output_len));
  }
  load.vocab_size = info.value("vocab_size", int64_t{256});
  const std::string label = info["attn"].get<std::string>() + " @ " + o.url;
  out << fmt::format("kvlab compare --suite serve: {} ({} requests a level)\n", label,
                     preset.requests)
      << std::flush;
  std::ostringstream quiet;  // the client's own progress lines
  const auto level = [&](double rate, uint64_t seed) {
    load.request_rate = rate;
    load.seed = seed;
    const serve::LoadReport r = serve::run_load(load, quiet);
    if (r.failed > 0) {
      throw SpecError("url", std::to_string(r.failed) + " requests failed: " +
                                 (r.errors.empty() ? std::string() : r.errors.front()));
    }
    return r;
  };
  const auto server = [](const serve::LoadReport& r, const char* key) {
    const auto it = r.server.find(key);
    return it == r.server.end() ? json(nullptr) : json(it->second);
  };
  // /metrics polled every 100 ms: the most running sequences seen, a lower bound; none seen (a
  // run shorter than a poll) is not known
  const auto peak_running = [&](const serve::LoadReport& r) {
    const json peak = server(r, "peak_num_requests_running");
    return peak.is_number() && peak.get<double>() > 0 ? peak : json(nullptr);
  };
  const serve::LoadReport sat = level(std::numeric_limits<double>::infinity(), 101);
  const double fixed_rate = kFixedRateFraction * sat.request_throughput;
  json row = {{"label", label},
              {"attn", info["attn"]},
              {"cache_dtype", info.value("cache_dtype", "?")},
              {"attn_precision", info.value("attn_precision", "?")},
              {"cache_bytes_per_token", field("bytes_per_token")},
              {"max_concurrency", field("max_concurrency")},
              {"peak_running", peak_running(sat)},
              {"request_throughput", sat.request_throughput},
              {"output_throughput", sat.output_throughput},
              {"saturation_ttft_ms", percentiles_json(sat.ttft_ms)},
              {"saturation_tpot_ms", percentiles_json(sat.tpot_ms)},
              {"preemptions", server(sat, "num_preemptions_total")},
              {"roofline_output_throughput", nullptr},
              {"bound", "not known over HTTP"},
              {"prompt_steps_s", nullptr},
              {"decode_steps_s", nullptr},
              {"decode_steps", nullptr},
              {"mean_decode_batch", nullptr}};
  json loads = json::array();
  for (size_t l = 0; l < std::size(kLoadFractions); ++l) {
    if (stop != nullptr && stop->load()) return interrupted(out);
    const serve::LoadReport r = level(kLoadFractions[l] * sat.request_throughput, 102 + l);
    loads.push_back(load_entry(label, kLoadFractions[l] * sat.request_throughput,
                               r.request_throughput, r.output_throughput, r.ttft_ms, r.tpot_ms,
                               peak_running(r), server(r, "num_preemptions_total")));
    if (kLoadFractions[l] == kFixedRateFraction) row["fixed_rate"] = fixed_rate_json(loads.back());
  }
  const json results = {{"suite", "serve"},
                        {"preset", o.preset},
                        {"weights", "the weights " + o.url + " serves"},
                        {"config",
                         {{"layers", field("layers")},
                          {"d_model", info.value("d_model", json(nullptr))},
                          {"heads", info.value("heads", json(nullptr))},
                          {"prompt_len", preset.prompt_len},
                          {"output_len", preset.output_len},
                          {"requests", preset.requests},
                          {"budget_bytes", field("budget_bytes")},
                          {"max_num_seqs", nullptr},
                          {"page_size", field("page_size")},
                          {"threads", nullptr},
                          {"weight_dtype", info.value("weight_dtype", "?")},
                          {"fixed_rate", fixed_rate},
                          {"bandwidth_gb_per_s", nullptr},
                          {"f32_peak_gmacs", nullptr},
                          {"bf16_peak_gmacs", nullptr},
                          {"int8_block_peak_gmacs", nullptr},
                          {"int8_peak_gmacs", nullptr},
                          {"cpu", "the server's"}}},
                        {"rows", json::array({row})},
                        {"loads", loads}};
  std::filesystem::create_directories(o.out);
  write_file_atomic(o.out + "/results.json", results.dump(2) + "\n");
  out << render_report(results, o.out);
  return 0;
}

}  // namespace

int run_compare_serve(const CompareOptions& o, const std::atomic<bool>* stop, std::ostream& out) {
  if (o.steps) throw SpecError("steps", "the serve suite trains nothing");
  if (!o.data.empty()) throw SpecError("data", "the serve suite reads no data");
  ServePreset preset = serve_preset(o.preset);
  if (o.requests) preset.requests = *o.requests;
  if (!o.url.empty()) return run_compare_serve_url(o, preset, stop, out);
  std::vector<ServeVariant> variants;
  std::vector<ModelConfig> configs;
  if (!o.checkpoints.empty()) {  // trained or converted models: their own weights and attention
    if (!o.attn.empty()) {
      throw SpecError("attn",
                      "--checkpoint models bring their own attention: give one or the other");
    }
    for (const std::string& checkpoint : o.checkpoints) {
      const std::string dir = nn::checkpoint_dir(checkpoint);
      const ModelConfig config = nn::load_model(dir)->config();
      const ModelShape& s = config.shape;
      if (!s.causal()) throw SpecError("checkpoint", dir + " is not a language model");
      const ModelShape& first = configs.empty() ? s : configs.front().shape;
      if (s.n_layers != first.n_layers || s.d_model != first.d_model ||
          s.n_heads != first.n_heads || s.vocab_size != first.vocab_size) {
        throw SpecError("checkpoint", dir + " has another shape than " + o.checkpoints.front() +
                                          " (layers, d_model, heads, vocabulary): the table "
                                          "compares one shape");
      }
      if (s.pos == PosScheme::kLearned && s.max_context < preset.prompt_len + preset.output_len) {
        throw SpecError("checkpoint", dir + " has " + std::to_string(s.max_context) +
                                          " learned positions; a request needs " +
                                          std::to_string(preset.prompt_len + preset.output_len));
      }
      variants.push_back({checkpoint + " (" + config.attn.to_string() + ")",
                          config.attn.to_string(), DType::kBf16, dir});
      configs.push_back(config);
    }
  } else if (o.attn.empty()) {
    variants = default_serve_variants();
  } else {
    for (const std::string& a : o.attn) variants.push_back({a, a});
  }
  if (configs.empty()) {
    for (const ServeVariant& v : variants) configs.push_back(serve_model(preset, v.attn));
  }
  // the shape every row shares (the preset's, or the checkpoints')
  preset.layers = configs.front().shape.n_layers;
  preset.d_model = configs.front().shape.d_model;
  preset.heads = configs.front().shape.n_heads;
  for (const std::string& dtype : o.cache_dtypes) {  // each --attn again with these caches
    const size_t n = variants.size();
    for (size_t v = 0; v < n; ++v) {
      const DType cache_dtype = parse_dtype(dtype, "cache-dtype");
      variants.push_back(
          {variants[v].label + " " + dtype, variants[v].attn, cache_dtype, variants[v].checkpoint});
      configs.push_back(configs[v]);
    }
  }
  const int64_t model_len = preset.prompt_len + preset.output_len;
  const int threads = nn::set_threads(0);
  constexpr int64_t kPageSize = infer::Generator::kPageSize;
  // the budget, and every variant's model checked, before anything is measured
  ModelShape mha_shape = configs.front().shape;
  mha_shape.pos = PosScheme::kRope;
  AttentionSpec mha_spec = ModelConfig::make(mha_shape, "mha", DType::kF32).attn;
  mha_spec.cache_dtype = DType::kBf16;
  const int64_t budget_bytes = preset.budget_mha_requests * model_len * preset.layers *
                               mha_spec.cache_layout().bytes_per_token();
  const DType weight_dtype = default_weight_dtype();
  const std::string weights = o.checkpoints.empty() ? "random weights" : "the checkpoints' weights";

  out << fmt::format(
      "kvlab compare --suite serve: {} variants; {}, {} layers, d {}, {} heads; "
      "requests of {} prompt + {} generated tokens; KV budget {} (mha's cache of {} such "
      "requests); {} requests a load level; {} threads, {} weights\n",
      variants.size(), weights, preset.layers, preset.d_model, preset.heads, preset.prompt_len,
      preset.output_len, format_bytes(budget_bytes, ByteUnits::kIec), preset.budget_mha_requests,
      preset.requests, threads, dtype_name(weight_dtype));
  const StepCeilings ceilings = measure_step_ceilings(threads);
  CeilingSampler sampler(threads);
  const double gb_per_s = ceilings.gb_per_s, f32_gmacs = ceilings.f32_gmacs,
               bf16_gmacs = ceilings.bf16_gmacs;
  out << fmt::format(
             "ceilings: {:.2f} GB/s read, {:.1f} GMAC/s f32, {:.1f} GMAC/s bf16, {:.1f} GMAC/s "
             "int8 blocks, {:.1f} GMAC/s int8 dot products\n",
             gb_per_s, f32_gmacs, bf16_gmacs, ceilings.int8_block_gmacs, ceilings.int8_gmacs)
      << std::flush;

  // random prompts, new ones at each load level (the engine's prefix cache would otherwise serve
  // a level's prompts from the last level's pages), the same ones for every variant
  const auto random_prompts = [&](uint64_t seed, int64_t n) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> token(0, configs.front().shape.vocab_size - 1);
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(n));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(preset.prompt_len));
      for (int64_t& t : p) t = token(rng);
    }
    return prompts;
  };

  json rows = json::array(), loads = json::array();
  std::vector<std::unique_ptr<serve::Engine>> engines;
  std::vector<LoadLevel> saturation;
  for (size_t v = 0; v < variants.size(); ++v) {
    AttentionSpec spec = configs[v].attn;
    spec.cache_dtype = variants[v].cache_dtype;
    const serve::KvBudget budget = serve::plan_kv_budget(spec.cache_layout(), preset.layers,
                                                         budget_bytes, kPageSize, model_len);
    serve::EngineOptions options;
    options.max_model_len = model_len;
    const serve::EngineSizing sizing = serve::size_engine(budget, preset.max_num_seqs);
    options.n_pages = sizing.n_pages;
    options.max_num_seqs = sizing.max_num_seqs;
    options.cache_dtype = variants[v].cache_dtype;
    options.weight_dtype = weight_dtype;
    options.threads = threads;
    torch::manual_seed(0);
    nn::TransformerModel model = variants[v].checkpoint.empty()
                                     ? nn::TransformerModel(configs[v], torch::kFloat32)
                                     : nn::load_model(variants[v].checkpoint);
    engines.push_back(std::make_unique<serve::Engine>(std::move(model), options));
    serve::Engine& engine = *engines.back();
    const double all_at_once = std::numeric_limits<double>::infinity();
    // warm-up (pages, the pool's threads), then 'requests' arriving together
    if (!drive(engine, random_prompts(100, 1), preset.output_len, all_at_once, 0, stop)) {
      return interrupted(out);
    }
    const std::optional<LoadLevel> saturated = drive(engine, random_prompts(101, preset.requests),
                                                     preset.output_len, all_at_once, 0, stop);
    if (!saturated) return interrupted(out);
    const LoadLevel& sat = *saturated;
    saturation.push_back(sat);
    // the variant's own ceilings, sampled just after its saturated run (three samples)
    const std::optional<MacKind> peak_kind = ceilings.product_kind(weight_dtype, sat.peak_running);
    CeilingSamples own;
    for (int s = 0; s < 3; ++s) sampler.sample(peak_kind, own);
    // the roofline at the batch it ran: per generated token, the weights ÷ the batch and its own
    // cache at the mean context read at the variant's bandwidth, or its share of the request's
    // multiply-adds (ModelConfig's count) at its peak of the products the step runs
    const double batch = static_cast<double>(std::max<int64_t>(1, sat.peak_running));
    const double weight_bytes =
        static_cast<double>(engine.generator().decode_model().weights().bytes_read_per_token());
    const double mean_context =
        static_cast<double>(preset.prompt_len) + static_cast<double>(preset.output_len) / 2;
    const double memory_s =
        (weight_bytes / batch + static_cast<double>(budget.bytes_per_token) * mean_context) /
        (own.gb_per_s() * 1e9);
    // the spec's count: the prompt's prefill (the output head over every prompt token, as the
    // seed's Table 6 counts it), then each generated token at its context
    Exact request_macs = configs[v].prefill_macs(preset.prompt_len).total;
    for (int64_t t = 0; t < preset.output_len; ++t) {
      request_macs = request_macs + configs[v].decode_macs(preset.prompt_len + t).total;
    }
    const double macs =
        static_cast<double>(request_macs.value()) / static_cast<double>(preset.output_len);
    const double peak_gmacs = own.gmacs();
    const double compute_s = peak_gmacs > 0 ? macs / (peak_gmacs * 1e9) : 0.0;
    const double roofline = 1.0 / std::max(memory_s, compute_s);
    rows.push_back({{"label", variants[v].label},
                    {"attn", configs[v].attn.to_string()},
                    {"cache_dtype", dtype_name(variants[v].cache_dtype)},
                    {"attn_precision",
                     attn_precision_name(engine.generator().decode_model().attn_precision())},
                    {"cache_bytes_per_token", budget.bytes_per_token},
                    {"max_concurrency", budget.max_concurrency},
                    {"peak_running", sat.peak_running},
                    {"request_throughput", sat.request_throughput},
                    {"output_throughput", sat.output_throughput},
                    {"saturation_ttft_ms", percentiles_json(sat.ttft_ms)},
                    {"saturation_tpot_ms", percentiles_json(sat.tpot_ms)},
                    {"preemptions", sat.preemptions},
                    {"roofline_output_throughput", roofline},
                    {"bandwidth_gb_per_s", own.gb_per_s()},
                    {"peak_gmacs", peak_gmacs > 0 ? json(peak_gmacs) : json(nullptr)},
                    {"prompt_steps_s", sat.prompt_steps_s},
                    {"decode_steps_s", sat.decode_steps_s},
                    {"decode_steps", sat.decode_steps},
                    {"mean_decode_batch",
                     sat.decode_steps > 0
                         ? static_cast<double>(sat.decoded) / static_cast<double>(sat.decode_steps)
                         : 0.0},
                    {"bound", compute_s > memory_s ? "compute" : "memory"}});
    out << fmt::format(
               "{}: {} B/token, holds {:.1f} requests, ran {} at once, {:.1f} requests/s, {:.0f} "
               "tokens/s ({} preemptions)\n",
               variants[v].label, budget.bytes_per_token, budget.max_concurrency, sat.peak_running,
               sat.request_throughput, sat.output_throughput, sat.preemptions)
        << std::flush;
  }
  // the offered loads, the same for every variant: fractions of the slowest saturation
  double slowest = std::numeric_limits<double>::infinity();
  for (const LoadLevel& s : saturation) slowest = std::min(slowest, s.request_throughput);
  const double fixed_rate = kFixedRateFraction * slowest;
  for (size_t v = 0; v < variants.size(); ++v) {
    for (size_t l = 0; l < std::size(kLoadFractions); ++l) {
      const double fraction = kLoadFractions[l];
      const std::optional<LoadLevel> offered =
          drive(*engines[v], random_prompts(102 + l, preset.requests), preset.output_len,
                fraction * slowest, l, stop);
      if (!offered) return interrupted(out);
      const LoadLevel& level = *offered;
      loads.push_back(load_entry(variants[v].label, level.rate, level.request_throughput,
                                 level.output_throughput, level.ttft_ms, level.tpot_ms,
                                 level.peak_running, level.preemptions));
      if (fraction == kFixedRateFraction) rows[v]["fixed_rate"] = fixed_rate_json(loads.back());
    }
    out << fmt::format("{}: {} offered loads done\n", variants[v].label, std::size(kLoadFractions))
        << std::flush;
  }
  const json results = {{"suite", "serve"},
                        {"preset", o.preset},
                        {"weights", weights},
                        {"config",
                         {{"layers", preset.layers},
                          {"d_model", preset.d_model},
                          {"heads", preset.heads},
                          {"prompt_len", preset.prompt_len},
                          {"output_len", preset.output_len},
                          {"requests", preset.requests},
                          {"budget_bytes", budget_bytes},
                          {"max_num_seqs", preset.max_num_seqs},
                          {"page_size", kPageSize},
                          {"threads", threads},
                          {"weight_dtype", dtype_name(weight_dtype)},
                          {"fixed_rate", fixed_rate},
                          {"bandwidth_gb_per_s", gb_per_s},
                          {"f32_peak_gmacs", f32_gmacs},
                          {"bf16_peak_gmacs", bf16_gmacs},
                          {"int8_block_peak_gmacs", ceilings.int8_block_gmacs},
                          {"int8_peak_gmacs", ceilings.int8_gmacs},
                          {"cpu", cpu_model_name()}}},
                        {"rows", rows},
                        {"loads", loads}};
  std::filesystem::create_directories(o.out);
  write_file_atomic(o.out + "/results.json", results.dump(2) + "\n");
  out << render_report(results, o.out);
  return 0;
}

std::string render_serve_report(const json& results, const std::string& dir) {
  const json& c = results.at("config");
  // numbers a --url run cannot know are null: "—"
  const auto number = [](const json& v, const char* format) {
    return v.is_null() ? std::string("—") : fmt::format(fmt::runtime(format), v.get<double>());
  };
  const auto ratio = [](const json& a, const json& b) {
    return a.is_null() || b.is_null() ? std::string("—")
                                      : format_percent(a.get<double>() / b.get<double>());
  };
  Table table({"variant", "cache B/token", "holds (bytes)", "ran at once", "of holds",
               "req/s (saturated)", "tok/s", "roofline tok/s", "of roofline", "bound",
               "prompt steps", "decode ms/step (batch)", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms",
               "preemptions"});
  std::vector<std::string> labels;
  Series held{"sequences its bytes hold", {}}, ran{"sequences it ran at once", {}};
  // results from before each variant sampled its own ceilings hold the run's alone
  bool per_variant = true;
  for (const json& r : results.at("rows")) per_variant = per_variant && r.contains("peak_gmacs");
  // the attention arithmetic each cache dtype ran ("not recorded" in results from before it was)
  std::vector<std::string> arithmetic;
  for (const json& r : results.at("rows")) {
    const std::string each =
        r.contains("attn_precision")
            ? fmt::format("{} on {} caches", r.at("attn_precision").get<std::string>(),
                          r.value("cache_dtype", "?"))
            : std::string("not recorded");
    if (std::find(arithmetic.begin(), arithmetic.end(), each) == arithmetic.end()) {
      arithmetic.push_back(each);
    }
  }
  for (const json& r : results.at("rows")) {
    const std::string label = r.at("label").get<std::string>();
    labels.push_back(label);
    const json& peak = r.at("peak_running");
    held.points.emplace_back(0, r.at("max_concurrency").get<double>());
    ran.points.emplace_back(0, peak.is_null() ? NAN : peak.get<double>());
    const json& prompt_s = r.at("prompt_steps_s");
    const json& decode_s = r.at("decode_steps_s");
    const json& fixed = r.at("fixed_rate");
    table.add_row({label, with_commas(r.at("cache_bytes_per_token").get<int64_t>()),
                   number(r.at("max_concurrency"), "{:.1f}"), number(peak, "{:.0f}"),
                   ratio(peak, r.at("max_concurrency")),
                   number(r.at("request_throughput"), "{:.2f}"),
                   number(r.at("output_throughput"), "{:.0f}"),
                   number(r.at("roofline_output_throughput"), "{:.0f}"),
                   ratio(r.at("output_throughput"), r.at("roofline_output_throughput")),
                   r.at("bound").get<std::string>(),
                   prompt_s.is_null() || decode_s.is_null()
                       ? std::string("—")
                       : format_percent(prompt_s.get<double>() /
                                        (prompt_s.get<double>() + decode_s.get<double>())),
                   decode_s.is_null() || r.at("decode_steps").is_null()
                       ? std::string("—")
                       : fmt::format("{:.2f} ({:.1f})",
                                     1e3 * decode_s.get<double>() /
                                         std::max(1.0, r.at("decode_steps").get<double>()),
                                     r.at("mean_decode_batch").get<double>()),
                   fmt::format("{:.1f} / {:.1f}", fixed.at("ttft_ms").at("p50").get<double>(),
                               fixed.at("ttft_ms").at("p99").get<double>()),
                   fmt::format("{:.2f} / {:.2f}", fixed.at("tpot_ms").at("p50").get<double>(),
                               fixed.at("tpot_ms").at("p99").get<double>()),
                   number(r.at("preemptions"), "{:.0f}") + " / " +
                       number(fixed.at("preemptions"), "{:.0f}")});
  }
  std::map<std::string, Series> curves;
  for (const json& l : results.at("loads")) {
    Series& s = curves[l.at("label").get<std::string>()];
    s.name = l.at("label").get<std::string>();
    s.points.emplace_back(l.at("offered_rate").get<double>(),
                          l.at("output_throughput").get<double>());
  }
  std::vector<Series> series;
  for (const std::string& label : labels) {
    if (curves.count(label) != 0) series.push_back(curves.at(label));
  }
  write_file_atomic(dir + "/throughput_vs_load.svg",
                    svg_line_chart("Output tokens/s against offered load",
                                   "offered load (requests/s)", "output tokens/s", series));
  write_file_atomic(dir + "/concurrency.svg",
                    svg_bar_chart("Sequences at one KV budget", "sequences", labels, {held, ran}));
  const std::string md =
      fmt::format(
          "# kvlab compare --suite serve ({} preset)\n\n"
          "{}, {} layers, d {}, {} heads, {} weights; attention arithmetic {}; requests of {} "
          "prompt + {} "
          "generated tokens (max model length {}); KV budget {} bytes in pages of {} tokens; "
          "at most {} sequences a step; {} threads on {}. Holds: requests of the max model "
          "length the budget's bytes hold (pages rounded down); ran at once: the most running "
          "sequences the engine had, with {} requests arriving at once (saturation: req/s, "
          "tok/s); roofline: per generated token, the weights ÷ that batch and its own cache "
          "at the mean context at the read bandwidth, or its share of the prompt's and output's "
          "dense multiply-adds at the peak of the products its weights run, whichever is longer "
          "(bound); the bandwidth and the peak: {} (before the variants: {} GB/s, {} GMAC/s f32, "
          "{} GMAC/s bf16); prompt "
          "steps: the saturated run's step time in "
          "steps that ran prompt tokens (the rest: steps of decode tokens alone, their mean "
          "time and batch); TTFT and TPOT at a fixed {:.2f} requests/s "
          "(half the slowest variant's saturated rate, Poisson arrivals); preemptions: "
          "saturated / fixed rate; —: not known (a --url run measures at the client).\n\n",
          results.value("preset", "?"), sentence_start(results.value("weights", "random weights")),
          number(c.at("layers"), "{:.0f}"), number(c.at("d_model"), "{:.0f}"),
          number(c.at("heads"), "{:.0f}"), c.at("weight_dtype").get<std::string>(),
          fmt::format("{}", fmt::join(arithmetic, ", ")), c.at("prompt_len").get<int64_t>(),
          c.at("output_len").get<int64_t>(),
          c.at("prompt_len").get<int64_t>() + c.at("output_len").get<int64_t>(),
          with_commas(c.at("budget_bytes").get<int64_t>()), c.at("page_size").get<int64_t>(),
          number(c.at("max_num_seqs"), "{:.0f}"), number(c.at("threads"), "{:.0f}"),
          c.at("cpu").get<std::string>(), c.at("requests").get<int64_t>(),
          per_variant ? "each variant's own, sampled just after its saturated run (medians of "
                        "three; the JSON rows' bandwidth_gb_per_s and peak_gmacs)"
                      : "the run's, measured once before the variants where known",
          number(c.at("bandwidth_gb_per_s"), "{:.2f}"), number(c.at("f32_peak_gmacs"), "{:.1f}"),
          number(c.at("bf16_peak_gmacs"), "{:.1f}"), c.at("fixed_rate").get<double>()) +
      table.to_markdown() +
      "\nPlots: throughput_vs_load.svg (output tokens/s at ¼, ½, 1 and 2× the slowest "
      "variant's saturated request rate), concurrency.svg (sequences held and run per "
      "variant).\n";
  write_file_atomic(dir + "/results.md", md);
  return md;
}

}  // namespace kvlab
