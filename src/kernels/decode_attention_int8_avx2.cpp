// AttnPrecision::kInt8 over q8_0 / q4_0 caches on AVX2 + FMA + F16C (built with those flags,
// chosen at run time where AVX-512 VNNI is missing): the driver of decode_attention_int8.inc
// with scores by vpmaddubsw on |q| and the key with q's sign, then vpmaddwd (no int16
// overflow: |q|, |k| <= 127), times both blocks' scales.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/page_layout.h"

namespace kvlab {
namespace {

#include "kernels/decode_attention_int8_common.inc"
#include "kernels/decode_attention_vector_math.inc"

float f16_at(const std::byte* at) {
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return _cvtsh_ss(bits);
}

// The AVX2 path reads the queries as q8_0 rows (Int8Context::q_quants).
int64_t packed_query_floats(int64_t /*rows*/, int64_t /*blocks*/) { return 0; }
void pack_queries(Int8Context& /*c*/, DType /*dtype*/, float* /*at*/) {}

// Eight vectors' sums as one vector: lane t = the sum of v[t]'s lanes.
__m256 sums_of_8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Eight tokens' content scores (lane t = token i0 + t of the block) for query row `row`: plus the
// rope slice (ropes: the block's rope rows transposed, [rw][kBlock]), scaled, into out[i0 …
// i0 + 7] (lanes past the block's tokens are never read).
void finish_scores(const Int8Context& c, int64_t row, __m256 content, const float* ropes,
                   int64_t i0, float* out) {
  const DecodeParams& p = *c.p;
  const int64_t rw = p.rope_width;
  const float* q_rope = p.q_rope + row * rw;
  for (int64_t j = 0; j < rw; ++j) {
    content = _mm256_fmadd_ps(_mm256_set1_ps(q_rope[j]), _mm256_loadu_ps(ropes + j * kBlock + i0),
                              content);
  }
  _mm256_storeu_ps(out + i0, _mm256_mul_ps(content, _mm256_set1_ps(p.scale)));
}

// Scores [heads][kBlock] of n tokens for query rows row0 … row0 + heads − 1 (scaled, rope slice
// included); eight tokens of one head at a time, their sums folded together. key_scales: the
// rows' block scales [blocks][kBlock] (0 past n), found once for the group's heads; products:
// room for one head's query × key scale products, [blocks][kBlock].
template <DType D>
void score_block(const Int8Context& c, int64_t row0, int64_t heads, const std::byte* const* keys,
                 const float* key_scales, const float* ropes, int64_t n, float* products,
                 float* scores) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t hh = 0; hh < heads; ++hh) {
    const int64_t row = row0 + hh;
    const int8_t* q = c.q_quants + row * c.blocks * kQB;
    const float* qs = c.q_scales + row * c.blocks;
    for (int64_t k = 0; k < c.blocks; ++k) {
      const __m256 s = _mm256_set1_ps(qs[k]);
      for (int64_t i = 0; i < kBlock; i += 8) {
        _mm256_storeu_ps(products + k * kBlock + i,
                         _mm256_mul_ps(s, _mm256_loadu_ps(key_scales + k * kBlock + i)));
      }
    }
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      const int64_t m = std::min<int64_t>(8, n - i0);
      const std::byte* key[8];  // past n: the last token again (its sums are not used)
      for (int t = 0; t < 8; ++t) key[t] = keys[i0 + std::min<int64_t>(t, m - 1)];
      __m256 acc[8];
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t k = 0; k < c.blocks; ++k) {
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k * kQB));
        const __m256i q_abs = _mm256_sign_epi8(qv, qv);
        const float* scale = products + k * kBlock + i0;
        for (int t = 0; t < 8; ++t) {
          const __m256i kv = block_quants<D>(key[t] + k * block_bytes<D>());
          const __m256i pairs = _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(kv, qv));
          const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[t] = _mm256_fmadd_ps(sums, _mm256_broadcast_ss(scale + t), acc[t]);
        }
      }
      finish_scores(c, row, sums_of_8(acc), ropes, i0, scores + hh * kBlock);
    }
  }
}

// A value row's blocks as f32 (q · d).
template <DType D>
void dequantize(const std::byte* row, int64_t width, float* out) {
  for (int64_t b = 0; b * kQB < width; ++b) {
    const std::byte* block = row + b * block_bytes<D>();
    const __m256 d = _mm256_set1_ps(f16_at(block));
    const __m256i q = block_quants<D>(block);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m256 v[4] = {
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d),
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d),
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d),
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d)};
    float* at = out + b * kQB;
    if ((b + 1) * kQB <= width) {
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(at + 8 * k, v[k]);
    } else {  // the row ends inside this block
      alignas(32) float tail[kQB];
      for (int k = 0; k < 4; ++k) _mm256_store_ps(tail + 8 * k, v[k]);
      for (int64_t i = 0; i < width - b * kQB; ++i) at[i] = tail[i];
    }
  }
}

// The online softmax of one block for `heads` heads: scores [heads][kBlock] (n valid) become
// weights relative to each head's new running maximum; alpha[hh] rescales what came before.
// partial: the first head's [max, sum, accumulator], the next heads `stride` floats apart.
void softmax_block(float* scores, int64_t n, int64_t heads, float* partial, int64_t stride,
                   float* alpha) {
  const __m256 neg = _mm256_set1_ps(-INFINITY);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 valid0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), lane));
  const __m256 valid1 =
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n) - 8), lane));
  for (int64_t hh = 0; hh < heads; ++hh) {
    float* s = scores + hh * kBlock;
    const __m256 a = _mm256_blendv_ps(neg, _mm256_loadu_ps(s), valid0);
    const __m256 b = _mm256_blendv_ps(neg, _mm256_loadu_ps(s + 8), valid1);
    const __m256 both = _mm256_max_ps(a, b);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float* ph = partial + hh * stride;
    const float m = std::max(ph[0], _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1))));
    const __m256 vm = _mm256_set1_ps(m);
    const __m256 ea = exp256(_mm256_sub_ps(a, vm)), eb = exp256(_mm256_sub_ps(b, vm));
    _mm256_storeu_ps(s, ea);
    _mm256_storeu_ps(s + 8, eb);
    // the first block's running maximum is −inf: exp256 gives 0 below −87
    alpha[hh] = _mm_cvtss_f32(_mm256_castps256_ps128(exp256(_mm256_set1_ps(ph[0] - m))));
    ph[1] = ph[1] * alpha[hh] + hsum(_mm256_add_ps(ea, eb));
    ph[0] = m;
  }
}

// acc[0..vw) = acc · alpha + Σ_i w[i] · rows[i] (rows: [n][vw] f32), the accumulator held in
// registers a chunk of columns at a time: 64 columns are eight independent FMA chains, enough to
// cover the FMA's latency at two a cycle (four chains ran at half that rate).
void accumulate(float* acc, float alpha, const float* w, const float* rows, int64_t n, int64_t vw) {
  int64_t c = 0;
  const __m256 a = _mm256_set1_ps(alpha);
  for (; c + 64 <= vw; c += 64) {
    __m256 x[8];
    for (int k = 0; k < 8; ++k) x[k] = _mm256_mul_ps(_mm256_loadu_ps(acc + c + 8 * k), a);
    for (int64_t i = 0; i < n; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* r = rows + i * vw + c;
      for (int k = 0; k < 8; ++k) x[k] = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 8 * k), x[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(acc + c + 8 * k, x[k]);
  }
  for (; c + 32 <= vw; c += 32) {
    __m256 x0 = _mm256_mul_ps(_mm256_loadu_ps(acc + c), a);
    __m256 x1 = _mm256_mul_ps(_mm256_loadu_ps(acc + c + 8), a);
    __m256 x2 = _mm256_mul_ps(_mm256_loadu_ps(acc + c + 16), a);
    __m256 x3 = _mm256_mul_ps(_mm256_loadu_ps(acc + c + 24), a);
    for (int64_t i = 0; i < n; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* r = rows + i * vw + c;
      x0 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r), x0);
      x1 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 8), x1);
      x2 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 16), x2);
      x3 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 24), x3);
    }
    _mm256_storeu_ps(acc + c, x0);
    _mm256_storeu_ps(acc + c + 8, x1);
    _mm256_storeu_ps(acc + c + 16, x2);
    _mm256_storeu_ps(acc + c + 24, x3);
  }
  for (; c + 8 <= vw; c += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(acc + c), _mm256_set1_ps(alpha));
    for (int64_t i = 0; i < n; ++i) {
      x = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(rows + i * vw + c), x);
    }
    _mm256_storeu_ps(acc + c, x);
  }
  for (; c < vw; ++c) {
    float x = acc[c] * alpha;
    for (int64_t i = 0; i < n; ++i) x += w[i] * rows[i * vw + c];
    acc[c] = x;
  }
}

// scores [heads][kBlock], alpha [heads], values [kBlock][vw], key scales and one head's scale
// products [blocks][kBlock] each
int64_t group_scratch_floats(const DecodeParams& p, int64_t blocks) {
  const int64_t per_group = p.n_heads / p.n_groups;
  return per_group * (kBlock + 1) + kBlock * p.value_width + 2 * blocks * kBlock;
}

// One block of n tokens for group g of sequence b: scores, the online softmax, and
// each value row dequantized once and added to every head of the group (part: the group's
// first head's [max, sum, accumulator]).
template <DType D>
void group_tile(const Int8Context& c, int64_t b, int64_t g, const BlockRows& block, int64_t n,
                const FarRows& next, const float* ropes, float* part, float* scratch) {
  const DecodeParams& p = *c.p;
  const int64_t G = p.n_groups, per_group = p.n_heads / G, vw = p.value_width;
  const int64_t key_row = row_bytes(D, p.key_width), value_row = row_bytes(D, vw);
  const bool same_rows = p.value_pool == p.key_pool && value_row == key_row;
  for (int64_t i = 0; i < next.n; ++i) {
    prefetch_row(next.keys[i], key_row);
    if (!same_rows) prefetch_row(next.values[i], value_row);
  }
  float* scores = scratch;
  float* alpha = scores + per_group * kBlock;
  float* values = alpha + per_group;
  float* key_scales = values + kBlock * vw;
  float* products = key_scales + c.blocks * kBlock;
  const std::byte* keys[kBlock];
  for (int64_t i = 0; i < n; ++i) keys[i] = block.keys[i] + g * block.key_group_bytes;
  for (int64_t k = 0; k < c.blocks; ++k) {
    for (int64_t i = 0; i < kBlock; ++i) {
      key_scales[k * kBlock + i] = i < n ? f16_at(keys[i] + k * block_bytes<D>()) : 0.0f;
    }
  }
  score_block<D>(c, b * p.n_heads + g * per_group, per_group, keys, key_scales, ropes, n, products,
                 scores);
  softmax_block(scores, n, per_group, part, 2 + vw, alpha);
  for (int64_t i = 0; i < n; ++i) {
    dequantize<D>(block.values[i] + g * block.value_group_bytes, vw, values + i * vw);
  }
  for (int64_t hh = 0; hh < per_group; ++hh) {
    accumulate(part + hh * (2 + vw) + 2, alpha[hh], scores + hh * kBlock, values, n, vw);
  }
}

#include "kernels/decode_attention_int8.inc"

}  // namespace

void decode_attention_int8_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work) {
  decode_int8(p, pool, work);
}

}  // namespace kvlab
