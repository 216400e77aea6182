// `kvlab eval --attn-precision P` / `--cache-dtype DT` / `--weight-dtype W,...`: a text
// checkpoint's held-out data through the decode path, token by token over a paged cache, in a
// reference set-up and in the asked one side by side; loss, perplexity, the KL divergence of the
// asked set-up's next-token distributions from the reference's, and how often both pick the same
// greedy token.
#include "experiments/eval_decode.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "infer/generator.h"
#include "kernels/attn_precision.h"
#include "kernels/fast_decoder.h"
#include "kernels/matvec.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

struct DecodeEval {
  DecodeSetup setup;
  KeyOrder key_order = KeyOrder::kRows;  // what the generator's cache chose (fastest_key_order)
  double loss_sum = 0;
  double kl_sum = 0;  // Σ over positions of KL(reference ‖ this)
  int64_t agree = 0;  // positions whose greedy token is the reference's
  int64_t positions = 0;
};

// log-softmax of a row of logits, in f64
void log_probs(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double max = logits[0];
  for (int64_t v = 1; v < n; ++v) max = std::max(max, static_cast<double>(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp(static_cast<double>(logits[v]) - max);
  const double log_sum = max + std::log(sum);
  for (int64_t v = 0; v < n; ++v) out[static_cast<size_t>(v)] = logits[v] - log_sum;
}

// Every eval batch through the decode step of every set-up in lockstep (the first is the
// reference): the B sequences of a batch step together, one position at a time; logits at
// position t score targets[t].
std::vector<DecodeEval> run_decode(nn::TransformerModel& model,
                                   const std::vector<data::Batch>& batches,
                                   const std::vector<DecodeSetup>& setups, int threads) {
  const int64_t B = batches.front().inputs.size(0), T = batches.front().inputs.size(1);
  std::vector<std::unique_ptr<infer::Generator>> gens;
  std::vector<DecodeEval> results(setups.size());
  for (size_t r = 0; r < setups.size(); ++r) {
    gens.push_back(std::make_unique<infer::Generator>(model, setups[r].cache_dtype, T, B, threads,
                                                      setups[r].rope_dtype, std::nullopt, 0,
                                                      setups[r].weight_dtype));
    gens.back()->decode_model().set_attn_precision(setups[r].precision);
  }
  const int64_t V = gens.front()->vocab_size();
  std::vector<std::vector<float>> logits(setups.size(),
                                         std::vector<float>(static_cast<size_t>(B * V)));
  std::vector<std::vector<int32_t>> seqs(setups.size(),
                                         std::vector<int32_t>(static_cast<size_t>(B)));
  std::vector<int64_t> tokens(static_cast<size_t>(B));
  std::vector<double> reference, mine;
  for (const data::Batch& batch : batches) {
    const int64_t n = batch.inputs.size(0);
    const torch::Tensor inputs = batch.inputs.to(torch::kInt64).contiguous();
    const torch::Tensor targets = batch.targets.to(torch::kInt64).contiguous();
    const int64_t* in = inputs.data_ptr<int64_t>();
    const int64_t* target = targets.data_ptr<int64_t>();
    for (size_t r = 0; r < gens.size(); ++r) {
      for (int64_t b = 0; b < n; ++b) seqs[r][static_cast<size_t>(b)] = gens[r]->add_sequence();
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < n; ++b) tokens[static_cast<size_t>(b)] = in[b * T + t];
      for (size_t r = 0; r < gens.size(); ++r) {
        gens[r]->step(seqs[r].data(), tokens.data(), n, logits[r].data());
      }
      for (int64_t b = 0; b < n; ++b) {
        const float* ref_row = logits[0].data() + b * V;
        log_probs(ref_row, V, reference);
        const int64_t ref_best = infer::greedy_token(ref_row, V);
        for (size_t r = 0; r < gens.size(); ++r) {
          const float* row = logits[r].data() + b * V;
          log_probs(row, V, mine);
          DecodeEval& e = results[r];
          e.loss_sum -= mine[static_cast<size_t>(target[b * T + t])];
          double kl = 0;
          for (int64_t v = 0; v < V; ++v) {
            const double lp = reference[static_cast<size_t>(v)];
            kl += std::exp(lp) * (lp - mine[static_cast<size_t>(v)]);
          }
          e.kl_sum += kl;
          e.agree += infer::greedy_token(row, V) == ref_best ? 1 : 0;
          ++e.positions;
        }
      }
    }
    for (size_t r = 0; r < gens.size(); ++r) {
      for (int64_t b = 0; b < n; ++b) gens[r]->free_sequence(seqs[r][static_cast<size_t>(b)]);
    }
  }
  // what the kernels computed in (kF32 where the asked precision did not apply), known once
  // they have run
  for (size_t r = 0; r < gens.size(); ++r) {
    results[r].setup = setups[r];
    results[r].setup.precision = gens[r]->decode_model().effective_attn_precision();
    results[r].key_order = gens[r]->cache().layout().key_order;
  }
  return results;
}

}  // namespace

DType parse_cache_dtype_flag(const std::string& text) { return parse_dtype(text, "cache-dtype"); }

namespace {

// The dtype of a layout's rope stream, or none without one.
std::optional<DType> rope_stream_dtype(const CacheLayout& layout) {
  for (const CacheStream& s : layout.streams) {
    if (s.role == StreamRole::kRope) return layout.stream_dtype(s);
  }
  return std::nullopt;
}

}  // namespace

DType parse_weight_dtype_flag(const std::string& text) {
  if (text == "auto") return default_weight_dtype();
  DType dtype;
  try {
    dtype = parse_dtype(text);
  } catch (const SpecError& e) {
    throw SpecError("weight-dtype",
                    std::string(e.what()).substr(e.field().size() + 2) + " (or auto)");
  }
  if (!matvec_supports(dtype)) {
    throw SpecError("weight-dtype",
                    "the dense layers take f32, bf16, f16, q8_0, q4_0 or auto, not " +
                        std::string(dtype_name(dtype)));
  }
  return dtype;
}

std::optional<DType> parse_rope_dtype_flag(const std::string& text, const AttentionSpec& attn,
                                           DType cache_dtype) {
  if (text.empty()) return std::nullopt;
  const DType dtype = parse_dtype(text, "rope-dtype");
  if (!rope_stream_dtype(attn.cache_layout()).has_value()) {
    throw SpecError("rope-dtype",
                    attn.to_string() + " keeps no rope stream (gva with dr > 0, gta and mla do)");
  }
  if (is_element_dtype(cache_dtype) && dtype != cache_dtype) {
    throw SpecError("rope-dtype", "the cache is " + std::string(dtype_name(cache_dtype)) +
                                      ", and so is its rope stream; another rope dtype applies "
                                      "under q8_0, q4_0 or fp8 caches");
  }
  return dtype;
}

nlohmann::json decode_eval_json(const DecodeEvalRow& r) {
  return {{"cache_dtype", dtype_name(r.setup.cache_dtype)},
          {"weight_dtype", dtype_name(r.setup.weight_dtype)},
          {"rope_dtype", r.rope_stream.has_value() ? nlohmann::json(dtype_name(*r.rope_stream))
                                                   : nlohmann::json(nullptr)},
          {"attn_precision", attn_precision_name(r.setup.precision)},
          {"key_order", key_order_name(r.key_order)},
          {"cache_bytes_per_token", r.cache_bytes_per_token},
          {"loss", r.loss},
          {"perplexity", r.perplexity},
          {"perplexity_vs_reference", r.perplexity_vs_reference},
          {"kl_from_reference", r.kl_from_reference},
          {"greedy_agreement", r.greedy_agreement},
          {"positions", r.positions}};
}

std::vector<DecodeEvalRow> eval_decode_setups(nn::TransformerModel& model, const data::Task& task,
                                              uint64_t seed, const std::vector<DecodeSetup>& setups,
                                              int threads, int64_t batch) {
  const std::vector<data::Batch> batches = task.eval_batches(seed, batch);
  if (batches.empty()) throw std::invalid_argument("the task has no held-out data");
  const std::vector<DecodeEval> runs = run_decode(model, batches, setups, threads);
  const double reference_loss = runs.front().loss_sum / static_cast<double>(runs.front().positions);
  std::vector<DecodeEvalRow> rows;
  for (const DecodeEval& r : runs) {
    ModelConfig config = model->config();
    config.attn.cache_dtype = r.setup.cache_dtype;
    config.attn.rope_cache_dtype = r.setup.rope_dtype;
    DecodeEvalRow row;
    row.setup = r.setup;
    row.cache_bytes_per_token = config.cache_bytes_per_token().value();
    row.rope_stream = rope_stream_dtype(config.attn.cache_layout());
    row.key_order = r.key_order;
    row.positions = r.positions;
    const double positions = static_cast<double>(r.positions);
    row.loss = r.loss_sum / positions;
    row.perplexity = std::exp(row.loss);
    row.perplexity_vs_reference = std::exp(row.loss - reference_loss);
    row.kl_from_reference = r.kl_sum / positions;
    row.greedy_agreement = static_cast<double>(r.agree) / positions;
    rows.push_back(row);
  }
  return rows;
}

namespace {

// The cache column: its dtype, and its rope stream's where --rope-dtype set it.
std::string cache_text(const DecodeSetup& s) {
  std::string text(dtype_name(s.cache_dtype));
  if (s.rope_dtype.has_value()) text += fmt::format(" (rope {})", dtype_name(*s.rope_dtype));
  return text;
}

std::string setup_text(const DecodeSetup& s) {
  return fmt::format("{} weights, {} cache, {} arithmetic", dtype_name(s.weight_dtype),
                     cache_text(s), attn_precision_name(s.precision));
}

}  // namespace

int run_eval_decode(const std::string& precision_text, const std::string& cache_dtype_text,
                    const std::string& rope_dtype_text,
                    const std::vector<std::string>& weight_dtype_texts, int threads, int64_t batch,
                    const data::Task& task, uint64_t seed, nn::TransformerModel& model,
                    const std::string& format, std::ostream& out) {
  const bool by_precision = !precision_text.empty();
  const bool by_weights = !weight_dtype_texts.empty();
  const char* flag = by_weights ? "weight-dtype" : by_precision ? "attn-precision" : "cache-dtype";
  if (by_weights && by_precision) {
    throw SpecError("weight-dtype",
                    "--weight-dtype and --attn-precision exclude each other (the "
                    "weights are compared in f32 arithmetic)");
  }
  if (task.metric() != data::Metric::kPerplexity) {
    throw SpecError(
        flag,
        "the decode-path evaluation scores text tasks; this checkpoint's task is " + task.name());
  }
  // --attn-precision P: f32 against P on one cache (f32 unless --cache-dtype says); otherwise
  // --cache-dtype DT against the bf16 cache (the f32 cache when DT is bf16), both in f32
  DType cache_dtype = by_precision || by_weights ? DType::kF32 : DType::kBf16;
  if (!cache_dtype_text.empty()) cache_dtype = parse_cache_dtype_flag(cache_dtype_text);
  const std::optional<DType> rope_dtype =
      parse_rope_dtype_flag(rope_dtype_text, model->config().attn, cache_dtype);
  std::vector<DecodeSetup> setups;
  std::vector<DecodeEvalRow> runs;
  try {
    if (by_weights) {
      setups.push_back({cache_dtype, AttnPrecision::kF32, rope_dtype, DType::kF32});
      for (const std::string& text : weight_dtype_texts) {
        const DType weights = parse_weight_dtype_flag(text);
        if (weights != DType::kF32) {
          setups.push_back({cache_dtype, AttnPrecision::kF32, rope_dtype, weights});
        }
      }
    } else if (by_precision) {
      setups.push_back({cache_dtype, AttnPrecision::kF32, rope_dtype});
      const bool bf16_ok = [&] {
        infer::Generator probe(model, cache_dtype, 1, 1, 1, rope_dtype);
        return probe.decode_model().supports_bf16_precision();
      }();
      const AttnPrecision asked = resolve_attn_precision(precision_text, bf16_ok, cache_dtype);
      if (asked != AttnPrecision::kF32) setups.push_back({cache_dtype, asked, rope_dtype});
    } else {
      setups.push_back(
          {cache_dtype == DType::kBf16 ? DType::kF32 : DType::kBf16, AttnPrecision::kF32, {}});
      setups.push_back({cache_dtype, AttnPrecision::kF32, rope_dtype});
    }
    runs = eval_decode_setups(model, task, seed, setups, threads, batch);
    if (by_precision && runs.size() == 2 && runs[1].setup.precision == AttnPrecision::kF32) {
      // the asked arithmetic did not apply: say so rather than label an f32 row with it
      const bool bf16 = setups[1].precision == AttnPrecision::kBf16;
      throw SpecError(
          "attn-precision",
          std::string(attn_precision_name(setups[1].precision)) + " arithmetic applies to " +
              (bf16 ? "bf16 caches without rebuilt keys; "
                    : "q8_0/q4_0 caches whose keys are not rotated or rebuilt on "
                      "read; ") +
              model->config().attn.to_string() + " with a " + std::string(dtype_name(cache_dtype)) +
              " cache computes in f32 (the f32 row is all there is)");
    }
  } catch (const SpecError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw SpecError("checkpoint", std::string("cannot decode this model: ") + e.what());
  }
  nlohmann::json rows = nlohmann::json::array();
  Table table({"weights", "cache", "attn precision", "keys", "cache bytes/token",
               "loss (nats/byte)", "perplexity", "vs first row", "KL from first row",
               "greedy agreement", "positions"});
  for (const DecodeEvalRow& r : runs) {
    rows.push_back(decode_eval_json(r));
    table.add_row({std::string(dtype_name(r.setup.weight_dtype)), cache_text(r.setup),
                   attn_precision_name(r.setup.precision), key_order_name(r.key_order),
                   with_commas(r.cache_bytes_per_token), fmt::format("{:.5f}", r.loss),
                   fmt::format("{:.4f}", r.perplexity),
                   fmt::format("{:+.4f}%", 100 * (r.perplexity_vs_reference - 1)),
                   fmt::format("{:.3g}", r.kl_from_reference), format_percent(r.greedy_agreement),
                   with_commas(r.positions)});
  }
  const DecodeEvalRow& reference = runs.front();
  const std::string attn = model->config().attn.to_string();
  if (format == "json") {
    out << nlohmann::json{{"attn", attn},
                          {"task", task.name()},
                          {"reference", setup_text(reference.setup)},
                          {"decode_batch", batch},
                          {"rows", rows}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
               "{} on {}: held-out data through the decode path (token by token over a paged "
               "cache, {} windows a step); the first row ({}) is the reference the others are "
               "compared with: KL of "
               "their next-byte distributions from its (nats, mean over positions), and greedy "
               "agreement, the positions where both pick the same most likely next byte; keys: the "
               "key "
               "stream's order in the cache pages (pairs where the cache takes them and the CPU "
               "scores them faster, else rows)\n\n",
               attn, task.name(), batch, setup_text(reference.setup))
        << table.to_markdown();
  }
  return 0;
}

}  // namespace kvlab
