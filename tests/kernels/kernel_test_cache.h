#pragma once

// The cache the decode-kernel tests lay out and how their DecodeParams point into it, written once
// for decode_kernel_test.cpp and prefill_attention_test.cpp.

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/decode_attention.h"

namespace kvlab {

// Streams in the order the tests read them: keys (or, one-stream, content rows: value rows where
// keys are rebuilt), values (two-stream only), then a rope stream where rope_width > 0.
inline CacheLayout kernel_test_layout(DType dtype, bool one_stream, int64_t groups,
                                      int64_t key_width, int64_t value_width, int64_t rope_width,
                                      bool rebuild = false) {
  CacheLayout layout;
  layout.kernel = one_stream ? DecodeKernel::kOneStream : DecodeKernel::kTwoStream;
  layout.dtype = dtype;
  layout.streams.push_back({one_stream ? StreamRole::kContent : StreamRole::kKey, groups,
                            rebuild ? value_width : key_width});
  if (!one_stream) layout.streams.push_back({StreamRole::kValue, groups, value_width});
  if (rope_width > 0) layout.streams.push_back({StreamRole::kRope, 1, rope_width});
  return layout;
}

// The per-call inputs both tests draw (in this order from `rng`, uniform in [-1, 1)): queries of n
// rows × heads (key and rope parts, ±2), the norm's gains (1 ± 0.5), and where keys are rebuilt
// each head's [vw × key_width] map (scaled so a rebuilt key is of order 1).
struct KernelTestQueries {
  std::vector<float> q, q_rope, norm, key_maps;
  KernelTestQueries(std::mt19937& rng, int64_t n, int64_t heads, int64_t key_width,
                    int64_t rope_width, int64_t vw, bool rebuild)
      : q(static_cast<size_t>(n * heads * key_width)),
        q_rope(static_cast<size_t>(n * heads * rope_width)),
        norm(static_cast<size_t>(key_width)),
        key_maps(static_cast<size_t>(rebuild ? heads * vw * key_width : 0)) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& x : q) x = 2.0f * uniform(rng);
    for (float& x : q_rope) x = 2.0f * uniform(rng);
    for (float& x : norm) x = 1.0f + 0.5f * uniform(rng);
    for (float& x : key_maps) x = uniform(rng) / std::sqrt(static_cast<float>(vw) / 3.0f);
  }
};

// p's pools: layer 0 of a cache laid out by kernel_test_layout.
inline void point_at_pools(DecodeParams& p, const PagedKvCache& cache, bool one_stream,
                           bool rope_stream) {
  p.key_pool = cache.pool(0, 0);
  p.value_pool = one_stream ? cache.pool(0, 0) : cache.pool(0, 1);
  p.rope_pool = rope_stream ? cache.pool(0, one_stream ? 1 : 2) : nullptr;
}

}  // namespace kvlab
