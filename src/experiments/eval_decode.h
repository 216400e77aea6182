#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "data/task.h"
#include "kernels/decode_attention.h"
#include "nn/transformer.h"
#include "spec/key_order.h"

namespace kvlab {

// One way of decoding: the cache's dtype, the attention's arithmetic and the dense layers'
// weights.
struct DecodeSetup {
  DType cache_dtype = DType::kF32;
  AttnPrecision precision = AttnPrecision::kF32;
  std::optional<DType> rope_dtype;  // the rope stream's, where not the spec's default
  DType weight_dtype = DType::kF32;
};

// The held-out text through the decode path with one set-up, compared with the first set-up's.
struct DecodeEvalRow {
  DecodeSetup setup;  // precision: what was computed (kF32 where bf16 did not apply)
  int64_t cache_bytes_per_token = 0;     // all layers
  std::optional<DType> rope_stream;      // the rope stream's dtype as cached; none without one
  KeyOrder key_order = KeyOrder::kRows;  // the key stream's order in the pages, as decoded
  double loss = 0;                       // nats per token
  double perplexity = 0;
  double perplexity_vs_reference = 1;  // this perplexity ÷ the first set-up's
  double kl_from_reference = 0;        // mean over positions of KL(first set-up ‖ this), nats
  double greedy_agreement = 1;         // positions whose greedy token is the first set-up's
  int64_t positions = 0;
};

// A --cache-dtype value; throws SpecError("cache-dtype") naming the problem.
DType parse_cache_dtype_flag(const std::string& text);

// A --weight-dtype value: f32 | bf16 | f16 | q8_0 | q4_0, or auto (default_weight_dtype: bf16
// where the decoder has SIMD kernels). Throws SpecError("weight-dtype") naming the problem.
DType parse_weight_dtype_flag(const std::string& text);

// A --rope-dtype value for a model with attention `attn` and a `cache_dtype` cache (none when
// `text` is empty); throws SpecError("rope-dtype") for an unknown dtype, a variant that keeps no
// rope stream, or an f32/bf16/f16 cache (whose rope stream is in the cache's dtype).
std::optional<DType> parse_rope_dtype_flag(const std::string& text, const AttentionSpec& attn,
                                           DType cache_dtype);

// A row as results.json and `eval --format json` write it.
nlohmann::json decode_eval_json(const DecodeEvalRow& row);

// Held-out windows a decode step takes by default: steps of the decode path stay small.
constexpr int64_t kDecodeEvalBatch = 16;

// `task`'s held-out windows (the run's `seed`) decoded token by token through a paged cache
// under every set-up in lockstep, `batch` windows a step; the first set-up is the reference of the
// comparisons. Throws std::invalid_argument when the model cannot decode.
std::vector<DecodeEvalRow> eval_decode_setups(nn::TransformerModel& model, const data::Task& task,
                                              uint64_t seed, const std::vector<DecodeSetup>& setups,
                                              int threads, int64_t batch = kDecodeEvalBatch);

// `kvlab eval --attn-precision P`: the held-out text through the decode path in f32 and in P
// ("f32", "bf16" or "auto") over a `cache_dtype` cache (f32 when empty). With `precision` empty:
// the bf16 cache against a `cache_dtype` one (f32 against bf16 when it is bf16), both in f32
// arithmetic. `rope_dtype` (--rope-dtype, may be empty; the CLI asks for --cache-dtype beside
// it): the rope stream of the `cache_dtype` cache. Per row: loss, perplexity, its change, the mean
// KL divergence from the first row's next-token distributions, greedy agreement. `seed`: the run's,
// as plain eval uses (the same held-out windows).
//
// With `weight_dtypes` (--weight-dtype, a list): f32 weights against each of them, all over one
// cache (`cache_dtype`, f32 when empty) in f32 arithmetic: the quality cost of storing the dense
// layers' matrices in that dtype. `batch`: windows a decode step (--decode-batch).
int run_eval_decode(const std::string& precision, const std::string& cache_dtype,
                    const std::string& rope_dtype, const std::vector<std::string>& weight_dtypes,
                    int threads, int64_t batch, const data::Task& task, uint64_t seed,
                    nn::TransformerModel& model, const std::string& format, std::ostream& out);

}  // namespace kvlab
