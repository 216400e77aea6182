// `kvlab eval --attn-precision P`: a text checkpoint's held-out data through the decode path,
// token by token over a paged cache, once in f32 and once in precision P; loss, perplexity and
// how often both pick the same greedy token.
#include "experiments/eval_decode.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "infer/generator.h"
#include "kernels/attn_precision.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

struct DecodeEval {
  AttnPrecision precision = AttnPrecision::kF32;
  double loss_sum = 0;
  int64_t positions = 0;
  std::vector<int32_t> greedy;  // the argmax at every position, in order
};

// Every eval batch through the decode step: the B sequences of a batch step together, one
// position at a time; logits at position t score targets[t].
DecodeEval run_decode(nn::TransformerModel& model, const std::vector<data::Batch>& batches,
                      DType cache_dtype, AttnPrecision precision, int threads) {
  const int64_t B = batches.front().inputs.size(0), T = batches.front().inputs.size(1);
  infer::Generator gen(model, cache_dtype, T, B, threads);
  gen.decode_model().set_attn_precision(precision);
  const int64_t V = gen.vocab_size();
  DecodeEval result;
  result.precision = precision;
  std::vector<float> logits(static_cast<size_t>(B * V));
  std::vector<int32_t> seqs(static_cast<size_t>(B));
  std::vector<int64_t> tokens(static_cast<size_t>(B));
  for (const data::Batch& batch : batches) {
    const int64_t n = batch.inputs.size(0);
    const torch::Tensor inputs = batch.inputs.to(torch::kInt64).contiguous();
    const torch::Tensor targets = batch.targets.to(torch::kInt64).contiguous();
    const int64_t* in = inputs.data_ptr<int64_t>();
    const int64_t* target = targets.data_ptr<int64_t>();
    for (int64_t b = 0; b < n; ++b) seqs[static_cast<size_t>(b)] = gen.add_sequence();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < n; ++b) tokens[static_cast<size_t>(b)] = in[b * T + t];
      gen.step(seqs.data(), tokens.data(), n, logits.data());
      for (int64_t b = 0; b < n; ++b) {
        const float* row = logits.data() + b * V;
        const int64_t best = infer::greedy_token(row, V);
        const double max = row[best];
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
        result.loss_sum += max + std::log(sum) - row[target[b * T + t]];
        result.greedy.push_back(static_cast<int32_t>(best));
        ++result.positions;
      }
    }
    for (int64_t b = 0; b < n; ++b) gen.free_sequence(seqs[static_cast<size_t>(b)]);
  }
  result.precision = gen.decode_model().effective_attn_precision();
  return result;
}

}  // namespace

int run_eval_decode(const std::string& precision_text, const std::string& cache_dtype_text,
                    int threads, const data::Task& task, uint64_t seed, nn::TransformerModel& model,
                    const std::string& format, std::ostream& out) {
  if (task.metric() != data::Metric::kPerplexity) {
    throw SpecError(
        "attn-precision",
        "the decode-path evaluation scores text tasks; this checkpoint's task is " + task.name());
  }
  DType cache_dtype = DType::kF32;
  try {
    cache_dtype = parse_dtype(cache_dtype_text);
  } catch (const SpecError& e) {
    throw SpecError("cache-dtype", std::string(e.what()).substr(e.field().size() + 2));
  }
  if (cache_dtype == DType::kFp8)
    throw SpecError("cache-dtype", "fp8 caches are counted, not decoded");
  // the eval windows in batches of up to 16 sequences (steps of the decode path stay small)
  const std::vector<data::Batch> batches = task.eval_batches(seed, 16);
  if (batches.empty()) throw SpecError("checkpoint", "the task has no held-out data");
  std::vector<DecodeEval> runs;
  AttnPrecision asked = AttnPrecision::kF32;
  try {
    runs.push_back(run_decode(model, batches, cache_dtype, AttnPrecision::kF32, threads));
    const bool bf16_ok = [&] {
      infer::Generator probe(model, cache_dtype, 1, 1, 1);
      return probe.decode_model().supports_bf16_precision();
    }();
    asked = resolve_attn_precision(precision_text, bf16_ok);
    if (asked != AttnPrecision::kF32) {
      runs.push_back(run_decode(model, batches, cache_dtype, asked, threads));
      if (runs.back().precision == AttnPrecision::kF32) {  // did not apply: say so, once
        runs.pop_back();
        throw SpecError("attn-precision",
                        "bf16 arithmetic applies to bf16 caches without rebuilt keys; " +
                            model->config().attn.to_string() + " with a " +
                            std::string(dtype_name(cache_dtype)) +
                            " cache computes in f32 (the f32 row is all there is)");
      }
    }
  } catch (const SpecError&) {
    throw;
  } catch (const std::invalid_argument& e) {
    throw SpecError("checkpoint", std::string("cannot decode this model: ") + e.what());
  }
  const DecodeEval& f32 = runs.front();
  nlohmann::json rows = nlohmann::json::array();
  Table table({"attn precision", "loss (nats/byte)", "perplexity", "vs f32", "greedy agreement",
               "positions"});
  for (const DecodeEval& r : runs) {
    const double loss = r.loss_sum / static_cast<double>(r.positions);
    const double f32_loss = f32.loss_sum / static_cast<double>(f32.positions);
    int64_t agree = 0;
    for (size_t i = 0; i < r.greedy.size(); ++i) agree += r.greedy[i] == f32.greedy[i] ? 1 : 0;
    const double agreement = static_cast<double>(agree) / static_cast<double>(r.positions);
    const double ratio = std::exp(loss) / std::exp(f32_loss);
    rows.push_back({{"attn_precision", attn_precision_name(r.precision)},
                    {"loss", loss},
                    {"perplexity", std::exp(loss)},
                    {"perplexity_vs_f32", ratio},
                    {"greedy_agreement", agreement},
                    {"positions", r.positions}});
    table.add_row({attn_precision_name(r.precision), fmt::format("{:.5f}", loss),
                   fmt::format("{:.4f}", std::exp(loss)),
                   fmt::format("{:+.4f}%", 100 * (ratio - 1)), format_percent(agreement),
                   with_commas(r.positions)});
  }
  const std::string attn = model->config().attn.to_string();
  if (format == "json") {
    out << nlohmann::json{{"attn", attn},
                          {"task", task.name()},
                          {"cache_dtype", dtype_name(cache_dtype)},
                          {"rows", rows}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format(
               "{} on {}: held-out data through the decode path ({} cache, token by token), in "
               "f32 and in the asked precision; greedy agreement: positions where both pick the "
               "same most likely next byte\n\n",
               attn, task.name(), dtype_name(cache_dtype))
        << table.to_markdown();
  }
  return 0;
}

}  // namespace kvlab
