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

// s[i] = q · rows[i] for 8 rows at once: 8 accumulators, q loaded once per 8 lanes.
void dot8(const float* q, const float* const* rows, int64_t width, float* s) {
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= width; c += 8) {
    const __m256 qc = _mm256_loadu_ps(q + c);
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(rows[i] + c), acc[i]);
  }
  // horizontal sums of the 8 accumulators into one vector (transpose-and-add)
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]);
  const __m256 t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]);
  const __m256 t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  const __m256 lo = _mm256_permute2f128_ps(u0, u1, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(u0, u1, 0x31);
  _mm256_storeu_ps(s, _mm256_add_ps(lo, hi));
  for (; c < width; ++c) {
    for (int i = 0; i < 8; ++i) s[i] += q[c] * rows[i][c];
  }
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

// The softmax-weighted sum of a block of value rows.
void accumulate_block(float* acc, float alpha, const float* w, const float* const* rows, int64_t n,
                      int64_t width) {
  accumulate_rows(
      acc, alpha, w, [rows](int64_t i) { return rows[i]; }, n, width);
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

}  // namespace

void decode_attention_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                           const std::vector<float>& rope_table) {
  validate_decode_params(p);
  const int64_t elem = dtype_bytes(p.dtype);
  const int64_t G = p.n_groups, per_group = p.n_heads / p.n_groups;
  const int64_t page = p.pages.page_size;
  const int64_t kw = p.key_width, vw = p.value_width, rw = p.rope_width;
  const bool shared_rows = p.key_pool == p.value_pool && kw == vw && !p.rope_on_read;

  // Work items: (sequence, chunk of tokens). An item streams whole token rows (every group
  // at once, contiguous in memory) and keeps one online-softmax partial per head.
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
  // per worker-item scratch: a block of f32 key rows, value rows, rope rows and scores
  const int64_t scratch = kBlock * (kw + vw + rw) + per_group * kBlock;
  const int64_t need = n_items * (partial + scratch);
  std::vector<float>& workspace = work.floats;
  if (static_cast<int64_t>(workspace.size()) < need) workspace.resize(static_cast<size_t>(need));
  float* const partials = workspace.data();
  float* const scratches = workspace.data() + n_items * partial;

  pool.parallel_for(n_items, [&](int64_t item) {
    const int64_t b =
        std::upper_bound(item_start.begin(), item_start.end(), item) - item_start.begin() - 1;
    const int64_t chunk = item - item_start[static_cast<size_t>(b)];
    const int64_t t0 = chunk * kChunkTokens;
    const int64_t t1 = std::min(tokens[static_cast<size_t>(b)], t0 + kChunkTokens);
    float* part = partials + item * partial;   // [H][2 + vw]
    float* keys = scratches + item * scratch;  // [kBlock][kw], one group at a time
    float* values = keys + kBlock * kw;        // [kBlock][vw]
    float* ropes = values + kBlock * vw;       // [kBlock][rw]
    float* scores = ropes + kBlock * rw;       // [per_group][kBlock]
    for (int64_t h = 0; h < p.n_heads; ++h) {
      float* ph = part + h * head_partial;
      ph[0] = -INFINITY;
      ph[1] = 0.0f;
      std::fill(ph + 2, ph + 2 + vw, 0.0f);
    }
    if (p.key_maps != nullptr) {
      rebuilt_keys_chunk(p, b, t0, t1, part, scratches + item * scratch, rope_table.data());
      return;
    }
    const int32_t first_page = p.pages.indptr[b];
    const float* key_rows[kBlock];
    const float* value_rows[kBlock];
    const float* rope_rows[kBlock];
    const int64_t key_row_bytes = G * kw * elem;
    const int64_t value_row_bytes = G * vw * elem;
    for (int64_t start = t0; start < t1; start += kBlock) {
      const int64_t n = std::min(kBlock, t1 - start);
      // Ask for the next block's rows now, so memory works while this block computes.
      const int64_t next_end = std::min(t1, start + 2 * kBlock);
      for (int64_t j = start + kBlock; j < next_end; ++j) {
        const int64_t slot = p.pages.page_ids[first_page + j / page] * page + j % page;
        const char* k_src = reinterpret_cast<const char*>(p.key_pool + slot * key_row_bytes);
        for (int64_t off = 0; off < key_row_bytes; off += 64)
          _mm_prefetch(k_src + off, _MM_HINT_T0);
        if (!shared_rows && !p.rope_on_read) {
          const char* v_src = reinterpret_cast<const char*>(p.value_pool + slot * value_row_bytes);
          for (int64_t off = 0; off < value_row_bytes; off += 64)
            _mm_prefetch(v_src + off, _MM_HINT_T0);
        }
        if (rw > 0) {
          _mm_prefetch(reinterpret_cast<const char*>(p.rope_pool + slot * rw * elem), _MM_HINT_T0);
        }
      }
      int64_t slots[kBlock];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = start + i;
        slots[i] = p.pages.page_ids[first_page + j / page] * page + j % page;
        rope_rows[i] = rw > 0
                           ? to_f32(p.rope_pool + slots[i] * rw * elem, p.dtype, rw, ropes + i * rw)
                           : nullptr;
      }
      for (int64_t i = n; i < kBlock; ++i) rope_rows[i] = rope_rows[n - 1];
      // one group at a time: its slice of the block's rows, converted to f32, stays in L1
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t i = 0; i < n; ++i) {
          const std::byte* k_src = p.key_pool + slots[i] * key_row_bytes + g * kw * elem;
          if (p.rope_on_read) {
            const float* raw = to_f32(k_src, p.dtype, kw, values + i * vw);  // value = raw C
            if (raw != values + i * vw)
              std::memcpy(values + i * vw, raw, static_cast<size_t>(kw) * 4);
            std::memcpy(keys + i * kw, values + i * vw, static_cast<size_t>(kw) * 4);
            rope_norm_on_read(keys + i * kw, kw, rope_table.data() + (start + i) * kw, p);
            key_rows[i] = keys + i * kw;
            value_rows[i] = values + i * vw;
          } else {
            key_rows[i] = to_f32(k_src, p.dtype, kw, keys + i * kw);
            value_rows[i] = shared_rows
                                ? key_rows[i]
                                : to_f32(p.value_pool + slots[i] * value_row_bytes + g * vw * elem,
                                         p.dtype, vw, values + i * vw);
          }
        }
        for (int64_t i = n; i < kBlock; ++i) key_rows[i] = key_rows[n - 1];
        for (int64_t hh = 0; hh < per_group; ++hh) {
          const int64_t h = g * per_group + hh;
          const float* q = p.q + (b * p.n_heads + h) * kw;
          const float* qr = rw > 0 ? p.q_rope + (b * p.n_heads + h) * rw : nullptr;
          float* s = scores + hh * kBlock;
          float rope_part[8];
          for (int64_t i = 0; i < n; i += 8) {
            dot8(q, key_rows + i, kw, s + i);
            if (qr != nullptr) {
              dot8(qr, rope_rows + i, rw, rope_part);
              for (int k = 0; k < 8; ++k) s[i + k] += rope_part[k];
            }
          }
          float block_max = -INFINITY;
          for (int64_t i = 0; i < n; ++i) {
            s[i] *= p.scale;
            block_max = std::max(block_max, s[i]);
          }
          float* ph = part + h * head_partial;
          const float m_new = std::max(ph[0], block_max);
          const float alpha = std::exp(ph[0] - m_new);  // exp(-inf) = 0 on the first block
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
          ph[1] = ph[1] * alpha + sum;
          ph[0] = m_new;
          accumulate_block(ph + 2, alpha, s, value_rows, n, vw);
        }
      }
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
