#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/attn_precision.h"
#include "kernels/fast_decoder.h"
#include "kernels/huge_page_floats.h"
#include "spec/attention_spec.h"

namespace kvlab {

// The rows `kvlab bench decode` times: one layer's decode step of one spec at one context, over
// caches of small pseudo-random values, and the probe of that kernel's compute alone.

// Tokens per cache page in every row (a whole number of the kernels' blocks).
inline constexpr int64_t kBenchPageTokens = 16;

// What a row's step reads and writes.
struct RowState {
  std::unique_ptr<PagedKvCache> cache;
  PageTable table;
  std::vector<float> q, qr, result, norm_weight, key_maps, z;
  HugePageFloats states;  // linear attention: on huge pages, like the cache's state slots
};

// One spec at one context over `layers` caches: step(decoder, r) runs the decode of layer
// r % layers.
struct DecodeRow {
  std::string attn;
  DType dtype = DType::kBf16;
  KeyOrder key_order = KeyOrder::kRows;
  AttnPrecision precision = AttnPrecision::kF32;  // what the step computes in
  int64_t context = 0, layers = 0, bytes = 0;     // bytes: one layer's, read by one step
  // multiply-adds of one step (the spec's decode_macs: scores and weighted sums, gva dr=0's
  // rebuilt keys, linear attention's state; element-wise work such as RoPE is not counted)
  double macs = 0;
  // of them, the content scores' share: the part int8 rows do as integer dot products
  double content_score_fraction = 0;
  std::function<void(FastDecoder&, int)> step;
  std::unique_ptr<RowState> state;
  std::vector<double> micros = {};
  double median_us = 0, min_us = 0, max_us = 0;
  // the kernel's compute alone (ComputeProbe), ns per cached token: on one thread, and the
  // step's wall time per token on the bench's threads; none for linear attention
  std::optional<double> compute_ns_per_token, compute_wall_ns_per_token;
};

// Bytes one step reads from one layer: the cache's rows (the spec's bytes per token), or linear
// attention's f32 states, whatever the context.
int64_t step_bytes(const CacheLayout& layout, int64_t context, int64_t batch);

// Builds a row whose `layers` caches hold small pseudo-random values.
// Throws SpecError when `simd_check` would compute it with the scalar reference.
DecodeRow make_row(const AttentionSpec& spec, AttnPrecision precision, int64_t context,
                   int64_t batch, int64_t layers, std::mt19937& rng, const FastDecoder& simd_check);

// The kernel's compute alone: two rows of one spec whose page tables cycle over a few pages (at
// most kHotBytes of rows a sequence, so they stay in each core's L2), at contexts of one and two
// work items per thread of `threads`; the slope between them is the time per cached token
// without the per-step costs (queries, merge), which long contexts share anyway. Timed on any
// decoder in samples spread over the bench's rounds, so it sees the same minutes as the rows.
class ComputeProbe {
 public:
  ComputeProbe(const AttentionSpec& spec, AttnPrecision precision, int64_t batch, int threads,
               std::mt19937& rng, const FastDecoder& simd_check);

  // One warm-up step of each row (brings its pages into L2), then `pairs` timed pairs: each
  // sample is the slope, ns per cached token.
  void time(FastDecoder& decoder, std::vector<double>& samples_ns, int64_t batch, int pairs = 3);

 private:
  DecodeRow rows_[2];
  int64_t tokens_[2] = {};
};

}  // namespace kvlab
