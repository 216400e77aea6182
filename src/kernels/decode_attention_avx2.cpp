// AVX2 + FMA + F16C decode attention (built with -mavx2 -mfma -mf16c, chosen at run time).
// v1: items of (sequence, group, chunk), 32-token blocks, scalar exp: 20% of bandwidth,
//     compute-bound on strided per-group reads.
// v2: items of (sequence, chunk) walk whole token rows (all groups, contiguous); blocks of
//     16 tokens scored 8 rows at a time, vector exp, one softmax rescale and one accumulator
//     load/store per block and head: 36% (gqa:8, 16k, bf16, 2 threads).
// v3: four independent FMA chains in the accumulation, the next block prefetched, and each
//     group's slice converted to f32 just before use so it stays in L1: 44% — still
//     compute-bound (one thread reaches 47% of its own bandwidth).
// Tried and dropped (v4): scoring 2 rows × up to 4 heads per pass and accumulating all heads
// of a group per loaded value row (fewer loads per FMA) measured 4–9% slower than v3 (gqa:8
// and one-stream G 8, 16k, bf16, 1 and 2 threads, same harness): the per-accumulator
// horizontal sums and weight broadcasts cost more than the loads they saved.
// Tried and dropped (v5, 2026-11-30): the same driver with AVX-512 primitives (16-lane
// conversion, dot and accumulate, masked tails; this machine has AVX-512 F/BW/VL/BF16)
// measured the same as v3 (gqa:8 16k bf16 2 threads: 7.67 vs 7.67 ms; gva:8,dr=16 6.33 vs
// 6.28), so the kernel is not limited by vector instruction throughput. With the cache hot
// (2k tokens, 8 MB) it reaches only 11.4 GB/s, and perf puts ~23% of its cycles on the
// software prefetches stalling; yet dropping the prefetches, or prefetching 2, 4 or 8 blocks
// ahead, changed nothing (7.0–7.5 ms). The limit looks like per-core memory-level
// parallelism while the core is busy computing, not arithmetic. Spreading the next block's
// prefetches over its heads (a few lines per head, so the fill buffers stay busy during
// compute), 1, 2 or 4 blocks ahead, to L1 or L2: 7.3–8.1 ms against 7.7–8.1 — within noise.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

constexpr int64_t kBlock = 16;         // tokens scored before one softmax rescale
constexpr int64_t kChunkTokens = 512;  // tokens per work item

// Row -> f32. Returns the row itself when it is already f32.
const float* to_f32(const std::byte* src, DType dtype, int64_t n, float* scratch) {
  if (dtype == DType::kF32) return reinterpret_cast<const float*>(src);
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (dtype == DType::kBf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
      _mm256_storeu_ps(scratch + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; ++i) scratch[i] = bf16_to_f32(in[i]);
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(scratch + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    }
    for (; i < n; ++i) scratch[i] = f16_to_f32(in[i]);
  }
  return scratch;
}

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// e^x for 8 lanes: range reduction x = n·ln2 + r, |r| ≤ ln2/2, degree-6 polynomial for e^r
// (relative error ~2e-7 over the softmax's range); inputs below -87 give 0.
__m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 poly = _mm256_set1_ps(1.0f / 720);
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 120));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 24));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f / 6));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(0.5f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  poly = _mm256_fmadd_ps(poly, r, _mm256_set1_ps(1.0f));
  const __m256i pow2 =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(poly, _mm256_castsi256_ps(pow2));
  return _mm256_andnot_ps(below, result);
}

// acc[0..width) = acc · alpha + Σ_i w[i] · row(i): the accumulator stays in registers across
// the n rows, so it is loaded and stored once per call, not once per row. row(i) returns
// row i's pointer (an array of rows, or rows at a fixed stride).
template <class RowAt>
void accumulate_rows(float* acc, float alpha, const float* w, RowAt row, int64_t n, int64_t width) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t c = 0;
  // four independent chains: one dependent FMA chain per 8 lanes would wait on FMA latency
  for (; c + 32 <= width; c += 32) {
    __m256 s0 = _mm256_mul_ps(a, _mm256_loadu_ps(acc + c));
    __m256 s1 = _mm256_mul_ps(a, _mm256_loadu_ps(acc + c + 8));
    __m256 s2 = _mm256_mul_ps(a, _mm256_loadu_ps(acc + c + 16));
    __m256 s3 = _mm256_mul_ps(a, _mm256_loadu_ps(acc + c + 24));
    for (int64_t i = 0; i < n; ++i) {
      const __m256 wi = _mm256_set1_ps(w[i]);
      const float* r = row(i) + c;
      s0 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r), s0);
      s1 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 8), s1);
      s2 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 16), s2);
      s3 = _mm256_fmadd_ps(wi, _mm256_loadu_ps(r + 24), s3);
    }
    _mm256_storeu_ps(acc + c, s0);
    _mm256_storeu_ps(acc + c + 8, s1);
    _mm256_storeu_ps(acc + c + 16, s2);
    _mm256_storeu_ps(acc + c + 24, s3);
  }
  for (; c + 8 <= width; c += 8) {
    __m256 sum = _mm256_mul_ps(a, _mm256_loadu_ps(acc + c));
    for (int64_t i = 0; i < n; ++i) {
      sum = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(row(i) + c), sum);
    }
    _mm256_storeu_ps(acc + c, sum);
  }
  for (; c < width; ++c) {
    float sum = alpha * acc[c];
    for (int64_t i = 0; i < n; ++i) sum += w[i] * row(i)[c];
    acc[c] = sum;
  }
}

void axpy(float* y, float alpha, const float* x, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void scale_row(float* y, float alpha, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(a, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

// K = RoPE_j(RMSNorm(c)) for the shared K=V + RoPE layout, in place on an f32 row;
// cos_sin holds [cos(j·θ_i) for i < half, sin(j·θ_i) for i < half] of this position.
void rope_norm_on_read(float* k, int64_t width, const float* cos_sin, const DecodeParams& p) {
  if (p.norm_weight != nullptr) {
    const float inv = 1.0f / std::sqrt(dot(k, k, width) / static_cast<float>(width) + p.norm_eps);
    int64_t i = 0;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; i + 8 <= width; i += 8) {
      _mm256_storeu_ps(k + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(k + i), vinv),
                                            _mm256_loadu_ps(p.norm_weight + i)));
    }
    for (; i < width; ++i) k[i] = k[i] * inv * p.norm_weight[i];
  }
  const int64_t half = width / 2;
  const float* cos = cos_sin;
  const float* sin = cos_sin + half;
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 x1 = _mm256_loadu_ps(k + i), x2 = _mm256_loadu_ps(k + half + i);
    const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
    _mm256_storeu_ps(k + i, _mm256_fnmadd_ps(x2, s, _mm256_mul_ps(x1, c)));
    _mm256_storeu_ps(k + half + i, _mm256_fmadd_ps(x1, s, _mm256_mul_ps(x2, c)));
  }
  for (; i < half; ++i) {
    const float x1 = k[i], x2 = k[i + half];
    k[i] = x1 * cos[i] - x2 * sin[i];
    k[i + half] = x2 * cos[i] + x1 * sin[i];
  }
}

// key[n] = Σ_d v[d] · m[d][n] for m [rows][width]: the rows of m weighted by v.
void vector_times_matrix(const float* v, const float* m, int64_t rows, int64_t width, float* key) {
  std::fill(key, key + width, 0.0f);
  accumulate_rows(
      key, 0.0f, v, [m, width](int64_t d) { return m + d * width; }, rows, width);
}

// gva dr=0: tokens [t0, t1) of sequence b, each head's key rebuilt from its group's value
// row and rotated to the token's position. The rebuild (d_h · d_n multiply-adds per head and
// token) dwarfs everything else, so the softmax is updated token by token.
void rebuilt_keys_chunk(const DecodeParams& p, int64_t b, int64_t t0, int64_t t1, float* part,
                        float* scratch, const float* rope_table) {
  const int64_t elem = dtype_bytes(p.dtype);
  const int64_t G = p.n_groups, per_group = p.n_heads / p.n_groups;
  const int64_t kw = p.key_width, vw = p.value_width, page = p.pages.page_size;
  const int64_t head_partial = 2 + vw;
  float* value = scratch;     // [vw]
  float* key = scratch + vw;  // [kw]
  const int32_t first_page = p.pages.indptr[b];
  for (int64_t j = t0; j < t1; ++j) {
    const int64_t slot = p.pages.page_ids[first_page + j / page] * page + j % page;
    for (int64_t g = 0; g < G; ++g) {
      const float* v = to_f32(p.value_pool + (slot * G + g) * vw * elem, p.dtype, vw, value);
      for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
        vector_times_matrix(v, p.key_maps + h * vw * kw, vw, kw, key);
        rope_norm_on_read(key, kw, rope_table + j * kw, p);
        const float s = dot(p.q + (b * p.n_heads + h) * kw, key, kw) * p.scale;
        float* ph = part + h * head_partial;
        if (s > ph[0]) {  // new maximum: rescale what was summed so far
          const float alpha = std::exp(ph[0] - s);
          scale_row(ph + 2, alpha, vw);
          ph[1] = ph[1] * alpha + 1.0f;
          ph[0] = s;
          axpy(ph + 2, 1.0f, v, vw);
        } else {
          const float w = std::exp(s - ph[0]);
          ph[1] += w;
          axpy(ph + 2, w, v, vw);
        }
      }
    }
  }
}

// ---- The block kernel: no conversion pass; cached rows are widened in registers. ----

constexpr int64_t kLanes = 16;  // elements per chunk: two 8-float vectors
constexpr int kMaxHeads = 4;    // heads that share one pass over a block's rows

constexpr int64_t bytes_of(DType d) { return d == DType::kF32 ? 4 : 2; }

// A chunk of 16 cached elements as two 8-float vectors. bf16 comes out de-interleaved —
// even elements, then odd ones — at the cost of one shift and one mask, where natural order
// would take two widening shuffles on the one shuffle port. Queries and accumulators are kept
// in the same "chunk order", so dot products and weighted sums never shuffle; accumulators
// return to natural order once per work item. f32 and f16 chunks are in natural order.
template <DType D>
struct Chunk;

template <>
struct Chunk<DType::kF32> {
  static constexpr bool kInterleaved = false;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    b = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8);
  }
  static float at(const std::byte* p, int64_t i) { return reinterpret_cast<const float*>(p)[i]; }
};

template <>
struct Chunk<DType::kBf16> {
  static constexpr bool kInterleaved = true;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    a = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));  // elements 0, 2, …, 14
    b = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536)));  // 1, 3, …, 15
  }
  static float at(const std::byte* p, int64_t i) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
};

template <>
struct Chunk<DType::kF16> {
  static constexpr bool kInterleaved = false;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p) + 1));
  }
  static float at(const std::byte* p, int64_t i) {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
};

// Natural order → chunk order, for n elements (the part past the last whole chunk keeps its
// natural order).
void to_chunk_order(const float* in, float* out, int64_t n, bool interleaved) {
  const int64_t full = interleaved ? n / kLanes * kLanes : 0;
  for (int64_t c = 0; c < full; c += kLanes) {
    for (int64_t k = 0; k < kLanes / 2; ++k) {
      out[c + k] = in[c + 2 * k];
      out[c + kLanes / 2 + k] = in[c + 2 * k + 1];
    }
  }
  std::copy(in + full, in + n, out + full);
}

void from_chunk_order(float* x, int64_t n, bool interleaved) {
  if (!interleaved) return;
  float natural[kLanes];
  for (int64_t c = 0; c + kLanes <= n; c += kLanes) {
    for (int64_t k = 0; k < kLanes / 2; ++k) {
      natural[2 * k] = x[c + k];
      natural[2 * k + 1] = x[c + kLanes / 2 + k];
    }
    std::copy(natural, natural + kLanes, x + c);
  }
}

// Sums of 8 vectors of 8 lanes each, as one vector (transpose-and-add).
__m256 reduce8(const float* lanes) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
  const __m256 t1 = _mm256_hadd_ps(_mm256_load_ps(lanes + 16), _mm256_load_ps(lanes + 24));
  const __m256 t2 = _mm256_hadd_ps(_mm256_load_ps(lanes + 32), _mm256_load_ps(lanes + 40));
  const __m256 t3 = _mm256_hadd_ps(_mm256_load_ps(lanes + 48), _mm256_load_ps(lanes + 56));
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Asks for a row's cache lines in L2. Software prefetches to L1 hold one of the core's few
// fill buffers each and stalled the core; L2 ones, issued a few per row as the previous unit
// is computed, keep memory busy at the pace the kernel consumes it.
void prefetch_row(const std::byte* row, int64_t bytes) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63}; line < end; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
  }
}

// The rows of the next (block, group) unit, prefetched one token at a time.
struct NextRows {
  const std::byte* const* keys = nullptr;    // [n] or nullptr
  const std::byte* const* values = nullptr;  // [n] or nullptr (one stream)
  int64_t n = 0;
  int64_t key_bytes = 0;
  int64_t value_bytes = 0;

  void prefetch(int64_t i) const {
    if (i >= n) return;
    if (keys != nullptr) prefetch_row(keys[i], key_bytes);
    if (values != nullptr) prefetch_row(values[i], value_bytes);
  }
};

// scores[hh][i] = q_hh · key_i + q_rope_hh · rope_i (unscaled) for HB heads and n ≤ kBlock
// rows; q and q_rope in chunk order. Each key chunk is loaded and widened once for the HB
// heads; two accumulators per head keep 2·HB independent FMA chains.
template <DType KD, DType RD, int HB>
void score_pass(const float* const* q, const std::byte* const* keys, int64_t kw,
                const float* const* q_rope, const std::byte* const* ropes, int64_t rw, int64_t n,
                float* scores, const NextRows& next) {
  constexpr int64_t ke = bytes_of(KD), re = bytes_of(RD);
  alignas(32) float lanes[HB][kBlock][8];  // per head and row: 8 partial sums
  float tails[HB][kBlock];
  const int64_t kfull = kw / kLanes * kLanes, rfull = rw / kLanes * kLanes;
  for (int64_t i = 0; i < n; ++i) {
    next.prefetch(i);
    __m256 a[HB], b[HB];
    for (int hh = 0; hh < HB; ++hh) a[hh] = b[hh] = _mm256_setzero_ps();
    const std::byte* k = keys[i];
    for (int64_t c = 0; c < kfull; c += kLanes) {
      __m256 x, y;
      Chunk<KD>::load(k + c * ke, x, y);
      for (int hh = 0; hh < HB; ++hh) {
        a[hh] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q[hh] + c), a[hh]);
        b[hh] = _mm256_fmadd_ps(y, _mm256_loadu_ps(q[hh] + c + 8), b[hh]);
      }
    }
    for (int64_t c = 0; c < rfull; c += kLanes) {
      __m256 x, y;
      Chunk<RD>::load(ropes[i] + c * re, x, y);
      for (int hh = 0; hh < HB; ++hh) {
        a[hh] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q_rope[hh] + c), a[hh]);
        b[hh] = _mm256_fmadd_ps(y, _mm256_loadu_ps(q_rope[hh] + c + 8), b[hh]);
      }
    }
    for (int hh = 0; hh < HB; ++hh) {
      _mm256_store_ps(lanes[hh][i], _mm256_add_ps(a[hh], b[hh]));
      float tail = 0.0f;
      for (int64_t c = kfull; c < kw; ++c) tail += q[hh][c] * Chunk<KD>::at(k, c);
      for (int64_t c = rfull; c < rw; ++c) tail += q_rope[hh][c] * Chunk<RD>::at(ropes[i], c);
      tails[hh][i] = tail;
    }
  }
  for (int hh = 0; hh < HB; ++hh) {
    for (int64_t i = n; i < (n + 7) / 8 * 8; ++i) {
      _mm256_store_ps(lanes[hh][i], _mm256_setzero_ps());
      tails[hh][i] = 0.0f;
    }
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      const __m256 sums = _mm256_add_ps(reduce8(lanes[hh][i0]), _mm256_loadu_ps(&tails[hh][i0]));
      _mm256_storeu_ps(scores + hh * kBlock + i0, sums);
    }
  }
}

// acc_hh = acc_hh · alpha_hh + Σ_i w[hh][i] · value_i for HB heads (acc in chunk order):
// 16 lanes of every head stay in registers while the block's rows stream past.
template <DType VD, int HB>
void value_pass(float* const* acc, const float* alpha, const float* w,
                const std::byte* const* values, int64_t n, int64_t vw) {
  constexpr int64_t ve = bytes_of(VD);
  const int64_t vfull = vw / kLanes * kLanes;
  for (int64_t c = 0; c < vfull; c += kLanes) {
    __m256 a[HB], b[HB];
    for (int hh = 0; hh < HB; ++hh) {
      const __m256 scale = _mm256_set1_ps(alpha[hh]);
      a[hh] = _mm256_mul_ps(scale, _mm256_loadu_ps(acc[hh] + c));
      b[hh] = _mm256_mul_ps(scale, _mm256_loadu_ps(acc[hh] + c + 8));
    }
    for (int64_t i = 0; i < n; ++i) {
      __m256 x, y;
      Chunk<VD>::load(values[i] + c * ve, x, y);
      for (int hh = 0; hh < HB; ++hh) {
        const __m256 wi = _mm256_broadcast_ss(w + hh * kBlock + i);
        a[hh] = _mm256_fmadd_ps(wi, x, a[hh]);
        b[hh] = _mm256_fmadd_ps(wi, y, b[hh]);
      }
    }
    for (int hh = 0; hh < HB; ++hh) {
      _mm256_storeu_ps(acc[hh] + c, a[hh]);
      _mm256_storeu_ps(acc[hh] + c + 8, b[hh]);
    }
  }
  for (int64_t c = vfull; c < vw; ++c) {
    for (int hh = 0; hh < HB; ++hh) {
      float sum = alpha[hh] * acc[hh][c];
      for (int64_t i = 0; i < n; ++i) sum += w[hh * kBlock + i] * Chunk<VD>::at(values[i], c);
      acc[hh][c] = sum;
    }
  }
}

// Online softmax over one block for HB heads: scales the scores, turns them into weights
// relative to the new running maximum, and returns each head's rescale factor in alpha.
template <int HB>
void softmax_block(float* scores, int64_t n, float scale, float* const* partial, float* alpha) {
  for (int hh = 0; hh < HB; ++hh) {
    float* s = scores + hh * kBlock;
    float block_max = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      s[i] *= scale;
      block_max = std::max(block_max, s[i]);
    }
    float* ph = partial[hh];  // [max, sum, accumulator]
    const float m_new = std::max(ph[0], block_max);
    alpha[hh] = std::exp(ph[0] - m_new);  // exp(-inf) = 0 on the first block
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 vsum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
      _mm256_storeu_ps(s + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum(vsum);
    for (; i < n; ++i) sum += (s[i] = std::exp(s[i] - m_new));
    ph[1] = ph[1] * alpha[hh] + sum;
    ph[0] = m_new;
  }
}

// One (block, group) unit for HB heads starting at head h0: score, softmax, accumulate.
template <DType KD, DType RD, DType VD, int HB>
void heads_pass(const float* const* q, const float* const* q_rope, const std::byte* const* keys,
                const std::byte* const* ropes, const std::byte* const* values, int64_t n,
                int64_t kw, int64_t rw, int64_t vw, float scale, float* const* partial,
                const NextRows& next) {
  alignas(32) float weights[HB * kBlock];
  float alpha[HB];
  float* acc[HB];
  score_pass<KD, RD, HB>(q, keys, kw, q_rope, ropes, rw, n, weights, next);
  softmax_block<HB>(weights, n, scale, partial, alpha);
  for (int hh = 0; hh < HB; ++hh) acc[hh] = partial[hh] + 2;
  value_pass<VD, HB>(acc, alpha, weights, values, n, vw);
}

template <DType KD, DType RD, DType VD>
void heads_pass_any(int hb, const float* const* q, const float* const* q_rope,
                    const std::byte* const* keys, const std::byte* const* ropes,
                    const std::byte* const* values, int64_t n, int64_t kw, int64_t rw, int64_t vw,
                    float scale, float* const* partial, const NextRows& next) {
  switch (hb) {
    case 1:
      return heads_pass<KD, RD, VD, 1>(q, q_rope, keys, ropes, values, n, kw, rw, vw, scale,
                                       partial, next);
    case 2:
      return heads_pass<KD, RD, VD, 2>(q, q_rope, keys, ropes, values, n, kw, rw, vw, scale,
                                       partial, next);
    case 3:
      return heads_pass<KD, RD, VD, 3>(q, q_rope, keys, ropes, values, n, kw, rw, vw, scale,
                                       partial, next);
    default:
      return heads_pass<KD, RD, VD, 4>(q, q_rope, keys, ropes, values, n, kw, rw, vw, scale,
                                       partial, next);
  }
}

// What one work item needs besides its token range.
struct ItemContext {
  const DecodeParams* p = nullptr;
  const float* q_chunked = nullptr;   // [n_seqs, n_heads, kw] in key chunk order
  const float* qr_chunked = nullptr;  // [n_seqs, n_heads, rw] in rope chunk order
  const float* rope_table = nullptr;  // rope on read: [positions][kw] cos, sin
};

// Tokens [t0, t1) of sequence b, every group, into part ([H][2 + vw], chunk order).
// D is the cache dtype; RopeOnRead turns each cached row into an f32 key first (the norm and
// rotation need the whole row), so keys are f32 while values stay in D.
template <DType D, bool RopeOnRead>
void run_item(const ItemContext& ctx, int64_t b, int64_t t0, int64_t t1, float* part,
              float* key_scratch) {
  constexpr DType KD = RopeOnRead ? DType::kF32 : D;
  constexpr int64_t elem = bytes_of(D);
  const DecodeParams& p = *ctx.p;
  const int64_t G = p.n_groups, per_group = p.n_heads / p.n_groups;
  const int64_t kw = p.key_width, vw = p.value_width, rw = p.rope_width;
  const int64_t page = p.pages.page_size;
  const int64_t key_row_bytes = G * kw * elem, value_row_bytes = G * vw * elem;
  const bool one_stream = p.key_pool == p.value_pool;
  const int32_t first_page = p.pages.indptr[b];
  auto slot_of = [&](int64_t j) {
    return static_cast<int64_t>(p.pages.page_ids[first_page + j / page]) * page + j % page;
  };
  // token-row bases of this block and the next: every group's slice is an offset into them
  const std::byte* key_base[2][kBlock];
  const std::byte* value_base[2][kBlock];
  const std::byte* ropes[kBlock];
  const std::byte* keys[kBlock];
  const std::byte* values[kBlock];
  const std::byte* next_keys[kBlock];
  const std::byte* next_values[kBlock];
  auto fill_bases = [&](int64_t start, int which) {
    const int64_t n = std::min(kBlock, t1 - start);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = slot_of(start + i);
      key_base[which][i] = p.key_pool + slot * key_row_bytes;
      value_base[which][i] = p.value_pool + slot * value_row_bytes;
    }
    return n;
  };
  int cur = 0;
  int64_t n = t0 < t1 ? fill_bases(t0, cur) : 0;
  for (int64_t start = t0; start < t1; start += kBlock) {
    const int64_t next_start = start + kBlock;
    const int64_t next_n = next_start < t1 ? fill_bases(next_start, 1 - cur) : 0;
    for (int64_t i = 0; i < n; ++i) {
      ropes[i] = rw > 0 ? p.rope_pool + slot_of(start + i) * rw * elem : nullptr;
    }
    for (int64_t g = 0; g < G; ++g) {
      // the unit computed next: this block's next group, or the next block's first one
      NextRows next;
      const int which = g + 1 < G ? cur : 1 - cur;
      const int64_t ng = g + 1 < G ? g + 1 : 0;
      next.n = g + 1 < G ? n : next_n;
      next.key_bytes = kw * elem;
      next.value_bytes = vw * elem;
      for (int64_t i = 0; i < next.n; ++i) {
        next_keys[i] = key_base[which][i] + ng * kw * elem;
        next_values[i] = value_base[which][i] + ng * vw * elem;
      }
      next.keys = next_keys;
      next.values = one_stream ? nullptr : next_values;
      if (g + 1 == G && rw > 0) {
        for (int64_t i = 0; i < next_n; ++i) {
          prefetch_row(p.rope_pool + slot_of(next_start + i) * rw * elem, rw * elem);
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        keys[i] = key_base[cur][i] + g * kw * elem;
        values[i] = value_base[cur][i] + g * vw * elem;
        if (RopeOnRead) {  // K = RoPE_j(RMSNorm(C)); the raw row is the value
          float* key = key_scratch + i * kw;
          const float* row = to_f32(keys[i], D, kw, key);
          if (row != key) std::memcpy(key, row, static_cast<size_t>(kw) * sizeof(float));
          rope_norm_on_read(key, kw, ctx.rope_table + (start + i) * kw, p);
          keys[i] = reinterpret_cast<const std::byte*>(key);
        }
      }
      for (int64_t h0 = g * per_group; h0 < (g + 1) * per_group; h0 += kMaxHeads) {
        const int hb = static_cast<int>(std::min<int64_t>(kMaxHeads, (g + 1) * per_group - h0));
        const float* q[kMaxHeads];
        const float* qr[kMaxHeads];
        float* partial[kMaxHeads];
        for (int hh = 0; hh < hb; ++hh) {
          const int64_t h = h0 + hh;
          q[hh] = ctx.q_chunked + (b * p.n_heads + h) * kw;
          qr[hh] = rw > 0 ? ctx.qr_chunked + (b * p.n_heads + h) * rw : nullptr;
          partial[hh] = part + h * (2 + vw);
        }
        heads_pass_any<KD, D, D>(hb, q, qr, keys, ropes, values, n, kw, rw, vw, p.scale, partial,
                                 h0 == g * per_group ? next : NextRows{});
      }
    }
    cur = 1 - cur;
    n = next_n;
  }
}

}  // namespace

void decode_attention_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                           const std::vector<float>& rope_table) {
  validate_decode_params(p);
  const int64_t page = p.pages.page_size;
  const int64_t kw = p.key_width, vw = p.value_width, rw = p.rope_width;
  const bool rebuild = p.key_maps != nullptr;

  // Work items: (sequence, chunk of tokens). An item keeps one online-softmax partial per head
  // and walks its tokens a block at a time, group by group.
  std::vector<int64_t>& tokens = work.tokens;
  std::vector<int64_t>& item_start = work.item_start;
  tokens.resize(static_cast<size_t>(p.n_seqs));  // capacity is kept: no allocation once grown
  item_start.assign(static_cast<size_t>(p.n_seqs) + 1, 0);
  for (int64_t b = 0; b < p.n_seqs; ++b) {
    const int32_t first = p.pages.indptr[b], last = p.pages.indptr[b + 1];
    const int64_t t = last == first ? 0 : (last - first - 1) * page + p.pages.last_page_len[b];
    tokens[static_cast<size_t>(b)] = t;
    const int64_t chunks = std::max<int64_t>(1, (t + kChunkTokens - 1) / kChunkTokens);
    item_start[static_cast<size_t>(b) + 1] = item_start[static_cast<size_t>(b)] + chunks;
  }
  const int64_t n_items = item_start.back();
  const int64_t head_partial = 2 + vw;  // max, sum, accumulator
  const int64_t partial = p.n_heads * head_partial;
  // per item: f32 keys of a block (rope on read), or the dr=0 rebuild's value and key rows
  const int64_t scratch = rebuild ? vw + kw : kBlock * kw;
  const int64_t q_floats = p.n_seqs * p.n_heads * (kw + rw);
  const int64_t need = q_floats + n_items * (partial + scratch);
  std::vector<float>& workspace = work.floats;
  if (static_cast<int64_t>(workspace.size()) < need) workspace.resize(static_cast<size_t>(need));
  float* const q_chunked = workspace.data();
  float* const qr_chunked = q_chunked + p.n_seqs * p.n_heads * kw;
  float* const partials = workspace.data() + q_floats;
  float* const scratches = partials + n_items * partial;

  // Queries in the chunk order of what they meet: cached rows, or f32 keys rotated on read.
  const bool keys_interleaved = p.dtype == DType::kBf16 && !p.rope_on_read;
  const bool cache_interleaved = p.dtype == DType::kBf16;
  const bool acc_interleaved = cache_interleaved && !rebuild;
  for (int64_t row = 0; row < p.n_seqs * p.n_heads; ++row) {
    to_chunk_order(p.q + row * kw, q_chunked + row * kw, kw, keys_interleaved);
    if (rw > 0) to_chunk_order(p.q_rope + row * rw, qr_chunked + row * rw, rw, cache_interleaved);
  }
  ItemContext ctx;
  ctx.p = &p;
  ctx.q_chunked = q_chunked;
  ctx.qr_chunked = qr_chunked;
  ctx.rope_table = rope_table.data();

  pool.parallel_for(n_items, [&](int64_t item) {
    const int64_t b =
        std::upper_bound(item_start.begin(), item_start.end(), item) - item_start.begin() - 1;
    const int64_t chunk = item - item_start[static_cast<size_t>(b)];
    const int64_t t0 = chunk * kChunkTokens;
    const int64_t t1 = std::min(tokens[static_cast<size_t>(b)], t0 + kChunkTokens);
    float* part = partials + item * partial;  // [H][2 + vw]
    float* item_scratch = scratches + item * scratch;
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* ph = part + h * head_partial;
      ph[0] = -INFINITY;
      ph[1] = 0.0f;
      std::fill(ph + 2, ph + 2 + vw, 0.0f);
    }
    if (rebuild) {
      rebuilt_keys_chunk(p, b, t0, t1, part, item_scratch, rope_table.data());
      return;
    }
    switch (p.dtype) {
      case DType::kF32:
        p.rope_on_read ? run_item<DType::kF32, true>(ctx, b, t0, t1, part, item_scratch)
                       : run_item<DType::kF32, false>(ctx, b, t0, t1, part, item_scratch);
        break;
      case DType::kBf16:
        p.rope_on_read ? run_item<DType::kBf16, true>(ctx, b, t0, t1, part, item_scratch)
                       : run_item<DType::kBf16, false>(ctx, b, t0, t1, part, item_scratch);
        break;
      default:
        p.rope_on_read ? run_item<DType::kF16, true>(ctx, b, t0, t1, part, item_scratch)
                       : run_item<DType::kF16, false>(ctx, b, t0, t1, part, item_scratch);
        break;
    }
    for (int64_t h = 0; h < p.n_heads; ++h) {
      from_chunk_order(part + h * head_partial + 2, vw, acc_interleaved);
    }
  });

  // Merge the chunks of each sequence, head by head.
  for (int64_t b = 0; b < p.n_seqs; ++b) {
    const int64_t first_item = item_start[static_cast<size_t>(b)];
    const int64_t chunks = item_start[static_cast<size_t>(b) + 1] - first_item;
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* out = p.out + (b * p.n_heads + h) * vw;
      std::fill(out, out + vw, 0.0f);
      if (tokens[static_cast<size_t>(b)] == 0) continue;
      float m = -INFINITY;
      for (int64_t c = 0; c < chunks; ++c) {
        m = std::max(m, partials[(first_item + c) * partial + h * head_partial]);
      }
      float l = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const float* ph = partials + (first_item + c) * partial + h * head_partial;
        if (ph[1] == 0.0f) continue;
        const float w = std::exp(ph[0] - m);
        l += ph[1] * w;
        axpy(out, w, ph + 2, vw);
      }
      scale_row(out, 1.0f / l, vw);
    }
  }
}

}  // namespace kvlab
