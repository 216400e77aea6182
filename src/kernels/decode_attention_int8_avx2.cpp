// AttnPrecision::kInt8 over q8_0 / q4_0 caches on AVX2 + FMA + F16C (built with those flags,
// chosen at run time where AVX-512 VNNI is missing): the driver of decode_attention_int8.inc
// with scores by vpmaddubsw on |q| and the key with q's sign, then vpmaddwd (no int16
// overflow: |q|, |k| <= 127), times both blocks' scales.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

#define KVLAB_INT8_LANES 8
#include "kernels/decode_attention_int8_common.inc"

int64_t score_scratch_floats(int64_t /*blocks*/) { return 0; }

// Scores [heads][kBlock] of n tokens for query rows row0 … row0 + heads − 1 (scaled, rope slice
// included); eight tokens of one head at a time, their sums folded together.
template <DType D>
void score_block(const Int8Context& c, int64_t row0, int64_t heads, const std::byte* const* keys,
                 const float* ropes, int64_t n, float* scores, float* /*scratch*/) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t hh = 0; hh < heads; ++hh) {
    const int64_t row = row0 + hh;
    const int8_t* q = c.q_quants + row * c.blocks * kQB;
    const float* qs = c.q_scales + row * c.blocks;
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      const int64_t m = std::min<int64_t>(8, n - i0);
      const std::byte* key[8];  // past n: the last token again (its sums are not used)
      for (int t = 0; t < 8; ++t) key[t] = keys[i0 + std::min<int64_t>(t, m - 1)];
      __m256 acc[8];
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t k = 0; k < c.blocks; ++k) {
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * kQB));
        const __m256i q_abs = _mm256_sign_epi8(qv, qv);
        for (int t = 0; t < 8; ++t) {
          const std::byte* block = key[t] + k * block_bytes<D>();
          const __m256i kv = block_quants<D>(block);
          const __m256i pairs = _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(kv, qv));
          const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[t] = _mm256_fmadd_ps(sums, _mm256_set1_ps(qs[k] * f16_at(block)), acc[t]);
        }
      }
      finish_scores(c, row, sums_of_8(acc), ropes, i0, m, scores + hh * kBlock);
    }
  }
}

#include "kernels/decode_attention_int8.inc"

}  // namespace

void decode_attention_int8_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work) {
  decode_int8(p, pool, work);
}

}  // namespace kvlab
