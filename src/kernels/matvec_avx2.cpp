// Built with -mavx2 -mfma -mf16c; reached only through FastDecoder when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matvec.h"

namespace kvlab {
namespace {

constexpr int64_t kQB = kQuantBlockElements;

template <DType D>
constexpr int64_t block_bytes() {
  return row_bytes(D, kQB);
}

#include "kernels/q8_0_blocks.inc"

// How far ahead of a tile of rows (tile_bytes of weights) its loops prefetch: whole tiles, at
// least kPrefetchBytes, so enough lines are in flight to cover the memory's latency at its
// bandwidth (the hardware prefetchers alone left a thread at ~50–60% of it on rows of 1–2 KiB).
constexpr int64_t kPrefetchBytes = 8192;
int64_t prefetch_ahead(int64_t tile_bytes) {
  return (kPrefetchBytes + tile_bytes - 1) / tile_bytes * tile_bytes;
}

float horizontal_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Eight weights of an element-dtype row from element i, widened to f32.
template <DType D>
__m256 load8(const std::byte* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else {
    const __m128i half = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i));
    if constexpr (D == DType::kBf16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    } else {
      return _mm256_cvtph_ps(half);
    }
  }
}

// Weight i of an element-dtype row (the tails past the last eight).
template <DType D>
float load1(const std::byte* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    return reinterpret_cast<const float*>(row)[i];
  } else {
    const uint16_t bits = reinterpret_cast<const uint16_t*>(row)[i];
    if constexpr (D == DType::kBf16) {
      const uint32_t wide = static_cast<uint32_t>(bits) << 16;
      float value;
      std::memcpy(&value, &wide, sizeof value);
      return value;
    } else {
      return _cvtsh_ss(bits);
    }
  }
}

// out[b][r] = W[r] · x_b for R weight rows (row_stride bytes apart) and NB rows of x: each
// weight vector is loaded (and widened) once for the NB rows.
template <DType D, int R, int NB>
void tile_elements(const std::byte* w, int64_t row_stride, int64_t in, const float* x, int64_t xs,
                   float* out) {
  __m256 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_ps();
  // the next R rows (contiguous after these) are fetched while these are multiplied: the
  // hardware prefetchers alone left a thread at ~60% of its bandwidth on rows of 1–2 KiB
  const std::byte* next = w + prefetch_ahead(R * row_stride);
  constexpr int64_t kElementBytes = dtype_bytes(D);
  int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    if ((i * kElementBytes) % 64 == 0) {
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + i * kElementBytes),
                     _MM_HINT_T0);
    }
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load8<D>(w + r * row_stride, i);
    for (int b = 0; b < NB; ++b) {
      const __m256 xv = _mm256_loadu_ps(x + b * xs + i);
      for (int r = 0; r < R; ++r) acc[b][r] = _mm256_fmadd_ps(wv[r], xv, acc[b][r]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    for (int r = 0; r < R; ++r) {
      float sum = horizontal_sum(acc[b][r]);
      for (int64_t k = i; k < in; ++k) sum += load1<D>(w + r * row_stride, k) * x[b * xs + k];
      out[b * R + r] = sum;
    }
  }
}

// The same for block weights against rows of x already rounded to q8_0 (quants [NB][blocks · 32]
// xs apart, scales [NB][blocks] ds apart): per block pair an exact integer dot product
// (vpmaddubsw on |w| and x with w's sign, then vpmaddwd), scaled by both blocks' scales.
template <DType D, int R, int NB>
void tile_blocks(const std::byte* w, int64_t row_stride, int64_t blocks, const int8_t* xq,
                 int64_t xs, const float* xd, int64_t ds, float* out) {
  __m256 acc[NB][R];
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  const std::byte* next = w + prefetch_ahead(R * row_stride);  // prefetched as in tile_elements
  for (int64_t k = 0; k < blocks; ++k) {
    for (int r = 0; r < R; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(next + r * row_stride + k * block_bytes<D>()),
                   _MM_HINT_T0);
    __m256i magnitude[R], wq[R];
    float dw[R];
    for (int r = 0; r < R; ++r) {
      const std::byte* block = w + r * row_stride + k * block_bytes<D>();
      wq[r] = block_quants<D>(block);
      magnitude[r] = _mm256_sign_epi8(wq[r], wq[r]);
      uint16_t bits;
      std::memcpy(&bits, block, sizeof bits);
      dw[r] = _cvtsh_ss(bits);
    }
    for (int b = 0; b < NB; ++b) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * xs + k * kQB));
      const float d = xd[b * ds + k];
      for (int r = 0; r < R; ++r) {
        const __m256i pairs = _mm256_maddubs_epi16(magnitude[r], _mm256_sign_epi8(xv, wq[r]));
        const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[b][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * d), dot, acc[b][r]);
      }
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int r = 0; r < R; ++r) out[b * R + r] = horizontal_sum(acc[b][r]);
}

// y for output rows [first, last) of one weight dtype: four rows at a time (then one), two
// rows of x at a time (then one).
template <DType D>
void rows_range(const MatVecParams& p, const MatVecScratch& scratch, int64_t first, int64_t last) {
  constexpr bool kBlocks = !is_element_dtype(D);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  const int64_t stride = row_bytes(D, p.in);
  const int64_t blocks = (p.in + kQB - 1) / kQB;
  const auto* weight = static_cast<const std::byte*>(p.weight);
  auto tile = [&]<int R, int NB>(int64_t o, int64_t b, float* out) {
    const std::byte* w = weight + o * stride;
    if constexpr (kBlocks) {
      tile_blocks<D, R, NB>(w, stride, blocks, scratch.quants.data() + b * blocks * kQB,
                            blocks * kQB, scratch.scales.data() + b * blocks, blocks, out);
    } else {
      tile_elements<D, R, NB>(w, stride, p.in, p.x + b * xs, xs, out);
    }
  };
  auto write = [&](int64_t o, int64_t b, int rows, int batch, const float* out) {
    for (int j = 0; j < batch; ++j) {
      float* y = p.y + (b + j) * ys + o;
      for (int r = 0; r < rows; ++r) y[r] = out[j * rows + r] + (p.bias ? p.bias[o + r] : 0.0f);
    }
  };
  float out[8];
  int64_t o = first;
  for (; o + 4 <= last; o += 4) {
    int64_t b = 0;
    for (; b + 2 <= p.n; b += 2) {
      tile.template operator()<4, 2>(o, b, out);
      write(o, b, 4, 2, out);
    }
    if (b < p.n) {
      tile.template operator()<4, 1>(o, b, out);
      write(o, b, 4, 1, out);
    }
  }
  for (; o < last; ++o) {
    for (int64_t b = 0; b < p.n; ++b) {
      tile.template operator()<1, 1>(o, b, out);
      write(o, b, 1, 1, out);
    }
  }
}

// Each row of x as q8_0 blocks, as store_rows rounds it (the tail block zero-padded).
void quantize_rows(const MatVecParams& p, MatVecScratch& scratch) {
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t blocks = (p.in + kQB - 1) / kQB;
  for (int64_t b = 0; b < p.n; ++b) {
    for (int64_t k = 0; k < blocks; ++k) {
      alignas(32) float block[kQB] = {};
      const int64_t first = k * kQB, count = std::min(kQB, p.in - first);
      std::memcpy(block, p.x + b * xs + first, static_cast<size_t>(count) * sizeof(float));
      scratch.scales[b * blocks + k] =
          quantize_q8_0_block(block, scratch.quants.data() + (b * blocks + k) * kQB);
    }
  }
}

template <DType D>
void run(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  if constexpr (!is_element_dtype(D)) quantize_rows(p, scratch);
  // Blocks of output rows big enough (~64k multiply-adds) that a pool hand-off pays for itself.
  const int64_t macs_per_row = std::max<int64_t>(1, p.in * p.n);
  const int64_t rows_per_block = std::max<int64_t>(4, (65536 / macs_per_row + 3) / 4 * 4);
  const int64_t n_blocks = (p.out + rows_per_block - 1) / rows_per_block;
  pool.parallel_for(n_blocks, [&](int64_t blk) {
    const int64_t first = blk * rows_per_block;
    rows_range<D>(p, scratch, first, std::min(p.out, first + rows_per_block));
  });
}

}  // namespace

void matvec_avx2(const MatVecParams& p, ThreadPool& pool, MatVecScratch& scratch) {
  validate_matvec(p);
  reserve_matvec_scratch(p, scratch);
  switch (p.weight_dtype) {
    case DType::kF32:
      return run<DType::kF32>(p, pool, scratch);
    case DType::kBf16:
      return run<DType::kBf16>(p, pool, scratch);
    case DType::kF16:
      return run<DType::kF16>(p, pool, scratch);
    case DType::kQ8_0:
      return run<DType::kQ8_0>(p, pool, scratch);
    case DType::kQ4_0:
      return run<DType::kQ4_0>(p, pool, scratch);
    case DType::kFp8:
      break;  // refused by validate_matvec
  }
}

}  // namespace kvlab
