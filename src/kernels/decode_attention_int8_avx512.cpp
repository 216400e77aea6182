// AttnPrecision::kInt8 over q8_0 / q4_0 caches with AVX-512 VNNI (built with those flags, chosen
// at run time where the CPU has them): the driver of decode_attention_int8.inc with scores by
// vpdpbusd, two blocks (64 quants) an instruction. vpdpbusd multiplies unsigned by signed bytes,
// so each key quant is offset by 128 once per token (its sign bit flipped) and shared by the
// group's heads; the 128 · Σ q it over-counts is each lane's starting value (Int8Context::
// q_offsets), so the integer sums are exact.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

#define KVLAB_INT8_LANES 16
#include "kernels/decode_attention_int8_common.inc"

int64_t pairs_of(int64_t blocks) { return (blocks + 1) / 2; }

// The block's keys offset by 128 ([kBlock][blocks · 32] bytes), then their scales as vectors
// ([kBlock][pairs][16]: 8 lanes of the pair's first block's scale, 8 of the second's).
int64_t score_scratch_floats(int64_t blocks) {
  return kBlock * blocks * kQB / 4 + kBlock * pairs_of(blocks) * 16;
}

__m256 fold16(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

// Scores [heads][kBlock] of n tokens for query rows row0 … row0 + heads − 1 (scaled, rope slice
// included): the keys prepared once, then eight tokens of one head at a time.
template <DType D>
void score_block(const Int8Context& c, int64_t row0, int64_t heads, const std::byte* const* keys,
                 const float* ropes, int64_t n, float* scores, float* scratch) {
  const int64_t blocks = c.blocks, row_quants = blocks * kQB;
  const int64_t pairs = pairs_of(blocks);
  auto* offset_keys = reinterpret_cast<uint8_t*>(scratch);
  float* key_scales = scratch + kBlock * row_quants / 4;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = 0; t < kBlock; ++t) {  // past n: zero keys (128) and scales, never used
    float* ks = key_scales + t * pairs * 16;
    for (int64_t k = 0; k < blocks; ++k) {
      const std::byte* block = t < n ? keys[t] + k * block_bytes<D>() : nullptr;
      const __m256i kv = block != nullptr ? block_quants<D>(block) : _mm256_setzero_si256();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(offset_keys + t * row_quants + k * kQB),
                          _mm256_xor_si256(kv, flip));
      _mm256_storeu_ps(ks + k * 8, _mm256_set1_ps(block != nullptr ? f16_at(block) : 0.0f));
    }
    if (blocks % 2 != 0) _mm256_storeu_ps(ks + blocks * 8, _mm256_setzero_ps());
  }
  for (int64_t hh = 0; hh < heads; ++hh) {
    const int64_t row = row0 + hh;
    const int8_t* q = c.q_quants + row * row_quants;
    const float* qs = c.q_scales + row * blocks;
    const int32_t* offsets = c.q_offsets + row * blocks * (kQB / 4);
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      __m512 acc[8];
      for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 2 <= blocks; k += 2) {
        const __m512i qv = _mm512_loadu_si512(q + k * kQB);
        const __m512i start = _mm512_loadu_si512(offsets + k * (kQB / 4));
        const __m512 q_scale = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(qs[k])),
                                                  _mm256_set1_ps(qs[k + 1]), 1);
        for (int t = 0; t < 8; ++t) {
          const int64_t token = i0 + t;
          const __m512i kv = _mm512_loadu_si512(offset_keys + token * row_quants + k * kQB);
          const __m512i dots = _mm512_dpbusd_epi32(start, kv, qv);
          const __m512 scale =
              _mm512_mul_ps(q_scale, _mm512_loadu_ps(key_scales + (token * pairs + k / 2) * 16));
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), scale, acc[t]);
        }
      }
      __m256 folded[8];
      for (int t = 0; t < 8; ++t) folded[t] = fold16(acc[t]);
      if (k < blocks) {  // an odd last block: 32 quants, 8 lanes
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * kQB));
        const __m256i start =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets + k * (kQB / 4)));
        for (int t = 0; t < 8; ++t) {
          const int64_t token = i0 + t;
          const __m256i kv = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(offset_keys + token * row_quants + k * kQB));
          const __m256i dots = _mm256_dpbusd_epi32(start, kv, qv);
          const __m256 scale = _mm256_mul_ps(
              _mm256_set1_ps(qs[k]), _mm256_loadu_ps(key_scales + (token * pairs + k / 2) * 16));
          folded[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), scale, folded[t]);
        }
      }
      finish_scores(c, row, sums_of_8(folded), ropes, i0, std::min<int64_t>(8, n - i0),
                    scores + hh * kBlock);
    }
  }
}

#include "kernels/decode_attention_int8.inc"

}  // namespace

void decode_attention_int8_avx512(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work) {
  decode_int8(p, pool, work);
}

}  // namespace kvlab
