// `kvlab bench generate`: end-to-end decode tokens/s of random-weight or trained models through
// the paged cache and the raw decode step, per weight dtype and batch size, against a roofline of
// each row's own measured ceilings.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "experiments/bench.h"
#include "experiments/bench_model.h"
#include "experiments/eval_decode.h"
#include "experiments/step_ceilings.h"
#include "infer/generator.h"
#include "kernels/attn_precision.h"
#include "kernels/compute_peak.h"
#include "kernels/fast_decoder.h"
#include "kernels/memory_bandwidth.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "nn/transformer.h"
#include "report/statistics.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/memory_budget.h"
#include "spec/memory_estimates.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

// One batch size of a bench generate row: its sequences and prompts, and what its timed
// generations measured.
struct BatchRun {
  int64_t batch = 0;
  std::vector<int32_t> seqs;
  std::vector<int64_t> next;                  // each sequence's next token
  std::vector<std::vector<int64_t>> prompts;  // each sequence's (--ragged: some shorter)
  int64_t prompt_tokens = 0, shortest_prompt = 0;
  std::optional<MacKind> peak_kind;         // the products its dense layers run (StepCeilings)
  std::vector<double> prefill_s, decode_s;  // a timed generation's each, in round order
  int64_t cache_bytes = 0;                  // every sequence's cache at a generation's end
  CeilingSamples ceilings;
  double roofline_ms = 0;  // a step's, once its row is computed
};

// The text table's header: the CPU, the models, how the rows were timed, and the ceilings before
// the rows.
std::string generate_header(const BenchModelOptions& b, const StepCeilings& ceilings, DType dtype,
                            int threads) {
  const int64_t bf16_rows = bf16_product_min_rows();            // 0: never
  const int64_t q8_0_rows = quant_tile_min_rows(DType::kQ8_0);  // 0: never
  const int64_t q4_0_rows = quant_tile_min_rows(DType::kQ4_0);
  const int64_t q8_0_expand_rows = quant_expand_min_rows(DType::kQ8_0);
  const int64_t q4_0_expand_rows = quant_expand_min_rows(DType::kQ4_0);
  // bench compute's int8 loop of the decoder's ISA: vpdpbusd (VNNI) or vpmaddubsw (AVX2)
  const std::string int8_dot_products =
      ceilings.int8_gmacs > 0
          ? fmt::format(
                "the int8 panel kernels' products (bench compute's int8 loop, vpdpbusd or "
                "AVX2's vpmaddubsw): their peak, {:.1f} GMAC/s",
                ceilings.int8_gmacs)
          : std::string("none");
  std::string models;
  if (!b.attn.empty()) {
    models = fmt::format("random weights: {} layers, D {}, {} heads", b.layers, b.d_model, b.heads);
  }
  if (!b.checkpoints.empty()) {
    models += std::string(models.empty() ? "" : "; ") + "checkpoints: their own shapes";
  }
  return fmt::format(
      "bench generate: {}; {}; {} cache, {} threads; each prompt runs through the raw "
      "step, up to {} of its tokens as the rows of one, their attention reading each "
      "cached row once for all of them ({}) (prefill tok/s: the batch's "
      "prompts one after another), decode through the same step (dense layers in the "
      "row's weight dtype, attention kernels), all the batch's sequences in one step; "
      "one warm-up generation of each batch size, then {} rounds of one generation of "
      "each in turn, and each row the median of its rounds (min–max); vs first batch: "
      "tokens/s ÷ the first --batch's in the same round, median over the rounds (in "
      "brackets: the same ratio of their rooflines, what it can reach); "
      "roofline: the weights a "
      "step reads (weight bytes) and every sequence's cache at the mean context once per "
      "step at the row's read bandwidth (GB/s: bench memory's probe after each of its "
      "timed generations, median; {:.2f} GB/s before the rows), or, where longer (c), "
      "one multiply-add per weight and sequence at the row's peak of the products its "
      "weights run (peak GMAC/s: bench compute's loop after each generation, median; "
      "before the rows: the f32 FMA peak {:.1f} GMAC/s for float weight dtypes; bf16 "
      "weights from batch {} run bf16 products: their peak, {:.1f} GMAC/s{}); "
      "dense / attention / other: one more generation with the kernels timed; keys: "
      "the cache's key order (--key-order){}\n\n",
      cpu_model_name(), models, dtype_name(dtype), threads, infer::kPrefillRows,
      detect_cpu_isa() == CpuIsa::kScalar ? "the scalar reference row by row"
                                          : prefill_path_name(prefill_path()),
      b.repeats, ceilings.gb_per_s, ceilings.f32_gmacs, bf16_rows, ceilings.bf16_gmacs,
      q8_0_rows > 0 ? fmt::format("; q8_0 weights from batch {}, q4_0 from {} run AMX int8 "
                                  "tiles a block of 32 inputs a multiply: their peak, "
                                  "{:.1f} GMAC/s{}; q8_0/q4_0 weights otherwise: {}",
                                  q8_0_rows, q4_0_rows, ceilings.int8_block_gmacs,
                                  q8_0_expand_rows > 0
                                      ? fmt::format("; q8_0 from batch {}, q4_0 from {} expanded "
                                                    "to bf16 and run bf16 tiles: bf16's peak",
                                                    q8_0_expand_rows, q4_0_expand_rows)
                                      : std::string(),
                                  int8_dot_products)
                    : "; q8_0/q4_0 weights: " + int8_dot_products,
      ceilings.bf16_loaded_gmacs > 0
          ? fmt::format("; bf16 tiles with their operands loaded from L1, as the "
                        "products load them: {:.1f} GMAC/s now (not a roofline: the "
                        "state of this CPU's tile unit, which some VMs halve or "
                        "quarter at times)",
                        ceilings.bf16_loaded_gmacs)
          : std::string());
}

}  // namespace

int run_bench_generate(const BenchModelOptions& b, std::ostream& out) {
  require_output_format(b.format);
  if (b.prompt <= 0 || b.generate <= 0 || b.long_prompt < 0) {
    throw SpecError("prompt", "--prompt and --generate must be > 0, --long-prompt >= 0");
  }
  if (b.repeats < 1) throw SpecError("repeats", "must be >= 1");
  if (b.attn.empty() && b.checkpoints.empty()) {
    throw SpecError("attn", "give at least one --attn or --checkpoint");
  }
  if (b.decode_batch.empty()) throw SpecError("batch", "give at least one batch size");
  for (int64_t batch : b.decode_batch) {
    if (batch < 1 || batch > 4096) throw SpecError("batch", "batch sizes must be in 1..4096");
  }
  const int64_t max_batch = *std::max_element(b.decode_batch.begin(), b.decode_batch.end());
  std::vector<DType> weight_dtypes;
  for (const std::string& text : b.weight_dtypes)
    weight_dtypes.push_back(parse_weight_dtype_flag(text));
  if (weight_dtypes.empty()) throw SpecError("weight-dtype", "give at least one weight dtype");
  const DType dtype = parse_dtype(b.cache_dtype);
  std::optional<KeyOrder> asked_order;  // none: auto
  if (b.key_order != "auto") {
    KeyOrder order = KeyOrder::kRows;
    if (!parse_key_order(b.key_order, order)) {
      throw SpecError("key-order", "\"" + b.key_order.substr(0, 40) +
                                       "\" is not a key order: auto | rows | pairs");
    }
    asked_order = order;
  }
  const int threads = nn::set_threads(b.threads);
  // the ceilings of a step: every weight and every sequence's cache read once at the measured
  // bandwidth, and its multiply-adds at the measured peak of the products its dense layers run
  // (StepCeilings::product_gmacs). Measured once the first row's memory is known to fit (the
  // probes take seconds).
  StepCeilings ceilings;
  bool measured_ceilings = false;
  // each row's own ceilings, sampled after each of its timed generations
  std::optional<CeilingSampler> sampler;
  const auto measure_ceilings = [&] {
    if (measured_ceilings) return;
    measured_ceilings = true;
    ceilings = measure_step_ceilings(threads);
    sampler.emplace(threads);
  };
  nlohmann::json rows = nlohmann::json::array();
  // rows whose weights and cache fit in the last-level cache, and the most bytes of those
  const int64_t llc_bytes = last_level_cache_bytes();
  int64_t rows_in_llc = 0, largest_in_llc = 0;
  Table table({"attn",        "weights",    "batch",         "precision",    "keys",
               "prompt",      "generated",  "prefill tok/s", "decode tok/s", "vs first batch",
               "ms/step",     "min–max ms", "roofline ms",   "of roofline",  "GB/s",
               "peak GMAC/s", "dense ms",   "attention ms",  "other ms",     "weight bytes",
               "cache bytes"});
  std::vector<int64_t> prompts = {b.prompt};
  if (b.long_prompt > 0) prompts.push_back(b.long_prompt);
  std::string precision_used;
  // each row: a random-weight model of an --attn spec, or a --checkpoint's trained one
  std::vector<std::pair<std::string, bool>> sources;
  for (const std::string& attn : b.attn) sources.emplace_back(attn, false);
  for (const std::string& checkpoint : b.checkpoints) sources.emplace_back(checkpoint, true);
  for (const auto& [source, is_checkpoint] : sources) {
    for (int64_t prompt : prompts) {
      nn::TransformerModel model{nullptr};
      if (is_checkpoint) {
        model = nn::load_model(nn::checkpoint_dir(source));
        const ModelShape& s = model->config().shape;
        if (!s.causal()) throw SpecError("checkpoint", source + " is not a language model");
        if (s.pos == PosScheme::kLearned && prompt + b.generate > s.max_context) {
          throw SpecError("prompt", fmt::format("{} has {} learned positions; prompt {} + "
                                                "generate {} exceed them",
                                                source, s.max_context, prompt, b.generate));
        }
      } else {
        torch::manual_seed(0);
        model = nn::TransformerModel(bench_model(b, source, prompt + b.generate), torch::kFloat32);
      }
      const ModelConfig& config = model->config();
      require_memory("prompt",
                     "caches for --batch " + std::to_string(max_batch) + " × (--prompt + " +
                         "--generate = " + std::to_string(prompt + b.generate) + ") tokens",
                     [&] { return config.cache_bytes(prompt + b.generate, max_batch); });
      measure_ceilings();
      std::optional<KeyOrder> key_order = asked_order;
      if (key_order == KeyOrder::kTokenPairs) {  // pairs where the cache takes it
        AttentionSpec spec = config.attn;
        spec.cache_dtype = dtype;
        if (!spec.cache_layout().takes_key_pairs()) key_order = KeyOrder::kRows;
      }
      for (DType weight_dtype : weight_dtypes) {
        infer::Generator gen(model, dtype, prompt + b.generate, max_batch, threads, std::nullopt,
                             key_order, 0, weight_dtype);
        const char* keys_used = key_order_name(gen.cache().layout().key_order);
        infer::DecodeModel& decode = gen.decode_model();
        decode.set_attn_precision(
            resolve_attn_precision(b.precision, decode.supports_bf16_precision(), dtype));
        precision_used = attn_precision_name(decode.attn_precision());
        const int64_t weight_bytes = decode.weights().bytes_read_per_token();
        std::vector<int64_t> tokens(static_cast<size_t>(prompt));
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = static_cast<int64_t>(i * 7 % static_cast<size_t>(config.shape.vocab_size));
        }
        std::vector<float> logits(static_cast<size_t>(max_batch * gen.vocab_size()));
        // each batch size's sequences and prompts, then its generations in turns with the others'
        std::vector<BatchRun> runs;
        for (int64_t batch : b.decode_batch) {
          BatchRun& run = runs.emplace_back();
          run.batch = batch;
          run.seqs.resize(static_cast<size_t>(batch));
          run.next.resize(static_cast<size_t>(batch));
          run.prompts.assign(static_cast<size_t>(batch), tokens);
          run.shortest_prompt = prompt;
          for (int64_t s = 0; s < batch; ++s) {
            std::vector<int64_t>& own = run.prompts[static_cast<size_t>(s)];
            if (b.ragged) own.resize(static_cast<size_t>(prompt - s % ((prompt + 1) / 2)));
            run.prompt_tokens += static_cast<int64_t>(own.size());
            run.shortest_prompt = std::min(run.shortest_prompt, static_cast<int64_t>(own.size()));
          }
          run.peak_kind = ceilings.product_kind(weight_dtype, batch);
        }
        // one generation: `batch` prompts prefilled, then `generate` greedy steps of all of them
        // through the raw decode step (allocation-free), those steps timed into `profile` where
        // given (not the prefill, though it runs through the same step); returns
        // {prefill s, decode s, every sequence's cache bytes at the end}
        auto generation = [&](BatchRun& run, infer::StepProfile* profile) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t s = 0; s < run.batch; ++s) {
            run.seqs[static_cast<size_t>(s)] = gen.add_sequence();
            const torch::Tensor prompt_logits =
                gen.feed(run.seqs[static_cast<size_t>(s)], run.prompts[static_cast<size_t>(s)]);
            run.next[static_cast<size_t>(s)] =
                infer::greedy_token(prompt_logits.data_ptr<float>(), gen.vocab_size());
          }
          const auto t1 = std::chrono::steady_clock::now();
          decode.set_profile(profile);
          for (int64_t i = 0; i < b.generate; ++i) {
            gen.step(run.seqs.data(), run.next.data(), run.batch, logits.data());
            for (int64_t s = 0; s < run.batch; ++s) {
              run.next[static_cast<size_t>(s)] =
                  infer::greedy_token(logits.data() + s * gen.vocab_size(), gen.vocab_size());
            }
          }
          const auto t2 = std::chrono::steady_clock::now();
          decode.set_profile(nullptr);
          const int64_t cache_bytes = gen.cache().bytes_in_use();
          for (int32_t seq : run.seqs) gen.free_sequence(seq);
          return std::tuple<double, double, int64_t>{std::chrono::duration<double>(t1 - t0).count(),
                                                     std::chrono::duration<double>(t2 - t1).count(),
                                                     cache_bytes};
        };
        for (BatchRun& run : runs) generation(run, nullptr);  // warm-up: caches, pages, the pool
        // rounds of one generation of every batch size in turn, each followed by a sample of its
        // ceilings: the rows' medians, and the ratios between them, come from the same minutes
        for (int r = 0; r < b.repeats; ++r) {
          for (BatchRun& run : runs) {
            const auto [p, d, bytes] = generation(run, nullptr);
            run.prefill_s.push_back(p);
            run.decode_s.push_back(d);
            run.cache_bytes = bytes;
            sampler->sample(run.peak_kind, run.ceilings);
          }
        }
        for (BatchRun& run : runs) {
          const int64_t batch = run.batch, prompt_tokens = run.prompt_tokens;
          const int64_t cache_bytes = run.cache_bytes;
          const std::vector<double>& decode_s = run.decode_s;
          const double mean_prompt =
              static_cast<double>(prompt_tokens) / static_cast<double>(batch);
          const std::optional<MacKind> peak_kind = run.peak_kind;
          const double row_gb_per_s = run.ceilings.gb_per_s();
          const double peak_gmacs = run.ceilings.gmacs();
          // where a step's time goes: one more generation with the kernels timed (not in the
          // medians: the clock reads cost a little)
          infer::StepProfile profile;
          generation(run, &profile);
          const double prefill_median = median_of(run.prefill_s);
          const double decode_median = median_of(decode_s);
          const double steps = static_cast<double>(b.generate);
          const double ms_per_step = 1e3 * decode_median / steps;
          // tokens/s against the first batch size's in the same round, the median over rounds
          std::vector<double> round_ratios;
          for (size_t r = 0; r < decode_s.size(); ++r) {
            round_ratios.push_back(static_cast<double>(batch) * runs.front().decode_s[r] /
                                   (static_cast<double>(runs.front().batch) * decode_s[r]));
          }
          const double vs_first_batch = median_of(round_ratios);
          // the roofline: the weights once and every sequence's cache at the run's mean
          // context per step at the row's bandwidth, or the step's dense multiply-adds (a
          // weight's one per sequence) at the row's peak of their kind, whichever is longer
          const double mean_cache_bytes = static_cast<double>(cache_bytes) *
                                          (mean_prompt + steps / 2) /
                                          (mean_prompt + static_cast<double>(b.generate));
          const double memory_ms =
              (static_cast<double>(weight_bytes) + mean_cache_bytes) / (row_gb_per_s * 1e6);
          const double macs = static_cast<double>(batch) *
                              static_cast<double>(config.param_count().value() -
                                                  config.shape.vocab_size * config.shape.d_model);
          const double compute_ms = peak_gmacs > 0 ? macs / (peak_gmacs * 1e6) : 0.0;
          const double roofline_ms = std::max(memory_ms, compute_ms);
          run.roofline_ms = roofline_ms;
          // the same ratio as the rooflines give it: what vs_first_batch can reach
          const double roofline_vs_first_batch =
              static_cast<double>(batch) * runs.front().roofline_ms /
              (static_cast<double>(runs.front().batch) * roofline_ms);
          const double per_step = static_cast<double>(std::max<int64_t>(1, profile.steps));
          const double dense_ms = profile.dense_us / per_step / 1e3;
          const double attention_ms = profile.attention_us / per_step / 1e3;
          const double other_ms =
              (profile.step_us - profile.dense_us - profile.attention_us) / per_step / 1e3;
          const double tokens_per_s = steps * static_cast<double>(batch) / decode_median;
          const bool fits_llc = llc_bytes > 0 && weight_bytes + cache_bytes <= llc_bytes;
          if (fits_llc) {
            ++rows_in_llc;
            largest_in_llc = std::max(largest_in_llc, weight_bytes + cache_bytes);
          }
          rows.push_back(
              {{"attn", config.attn.to_string()},
               {"checkpoint", is_checkpoint ? source : ""},
               {"weight_dtype", dtype_name(weight_dtype)},
               {"batch", batch},
               {"attn_precision", precision_used},
               {"key_order", keys_used},
               {"prompt", prompt},
               {"ragged", b.ragged},
               {"mean_prompt", mean_prompt},
               {"generated", b.generate},
               {"repeats", b.repeats},
               {"prefill_tokens_per_s", static_cast<double>(prompt_tokens) / prefill_median},
               {"decode_tokens_per_s", tokens_per_s},
               {"first_batch", runs.front().batch},
               {"tokens_per_s_vs_first_batch", vs_first_batch},
               {"roofline_vs_first_batch", roofline_vs_first_batch},
               {"ms_per_step", ms_per_step},
               {"ms_per_step_min", 1e3 * min_of(decode_s) / steps},
               {"ms_per_step_max", 1e3 * max_of(decode_s) / steps},
               {"weight_bytes", weight_bytes},
               {"mean_cache_bytes", mean_cache_bytes},
               {"bandwidth_gb_per_s", row_gb_per_s},
               {"peak_gmacs",
                peak_gmacs > 0 ? nlohmann::json(peak_gmacs) : nlohmann::json(nullptr)},
               {"peak_kind", peak_kind.has_value() ? nlohmann::json(mac_kind_name(*peak_kind))
                                                   : nlohmann::json(nullptr)},
               {"memory_roofline_ms", memory_ms},
               {"compute_roofline_ms",
                compute_ms > 0 ? nlohmann::json(compute_ms) : nlohmann::json(nullptr)},
               {"roofline_ms", roofline_ms},
               {"roofline_fraction", roofline_ms / ms_per_step},
               {"profile_dense_ms", dense_ms},
               {"profile_attention_ms", attention_ms},
               {"profile_other_ms", other_ms},
               {"cache_bytes", cache_bytes},
               {"fits_last_level_cache", fits_llc}});
          table.add_row({is_checkpoint ? source : config.attn.to_string(),
                         std::string(dtype_name(weight_dtype)),
                         std::to_string(batch),
                         precision_used,
                         keys_used,
                         b.ragged ? fmt::format("{}–{}", run.shortest_prompt, prompt)
                                  : std::to_string(prompt),
                         std::to_string(b.generate),
                         fmt::format("{:.0f}", static_cast<double>(prompt_tokens) / prefill_median),
                         fmt::format("{:.0f}", tokens_per_s),
                         fmt::format("{:.2f}× ({:.1f}×)", vs_first_batch, roofline_vs_first_batch),
                         fmt::format("{:.3f}", ms_per_step),
                         fmt::format("{:.3f}–{:.3f}", 1e3 * min_of(decode_s) / steps,
                                     1e3 * max_of(decode_s) / steps),
                         fmt::format("{:.3f}{}", roofline_ms, compute_ms > memory_ms ? " (c)" : ""),
                         format_percent(roofline_ms / ms_per_step),
                         fmt::format("{:.1f}", row_gb_per_s),
                         peak_gmacs > 0 ? fmt::format("{:.1f}", peak_gmacs) : std::string("—"),
                         fmt::format("{:.3f}", dense_ms),
                         fmt::format("{:.3f}", attention_ms),
                         fmt::format("{:.3f}", other_ms),
                         with_commas(weight_bytes),
                         with_commas(cache_bytes)});
        }
      }
    }
  }
  measure_ceilings();  // (no row: the header still states them)
  if (b.format == "json") {
    out << nlohmann::json{{"bandwidth_gb_per_s", ceilings.gb_per_s},
                          {"f32_peak_gmacs", ceilings.f32_gmacs},
                          {"bf16_peak_gmacs", ceilings.bf16_gmacs},
                          {"int8_block_peak_gmacs", ceilings.int8_block_gmacs},
                          {"int8_peak_gmacs", ceilings.int8_gmacs},
                          {"bf16_loaded_tiles_gmacs", ceilings.bf16_loaded_gmacs},
                          {"last_level_cache_bytes", llc_bytes},
                          {"threads", threads},
                          {"cpu", cpu_model_name()},
                          {"rows", rows}}
               .dump(2)
        << "\n";
  } else {
    out << generate_header(b, ceilings, dtype, threads) << table.to_markdown();
    if (rows_in_llc > 0) {
      out << fmt::format(
          "\nWeights and cache of at most {} bytes a step ({} of these rows) fit in the {} MiB of "
          "last-level cache this CPU reports: from the second step on they come partly from "
          "that cache, so the roofline at the memory's bandwidth is not their ceiling and their "
          "fraction of it can pass 100% (JSON: fits_last_level_cache).\n",
          with_commas(largest_in_llc), rows_in_llc, llc_bytes >> 20);
    }
  }
  return 0;
}

}  // namespace kvlab
