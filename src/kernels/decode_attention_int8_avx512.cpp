// AttnPrecision::kInt8 over q8_0 / q4_0 caches with AVX-512 VNNI (built with those flags, chosen
// at run time where the CPU has them): the hooks of decode_attention_int8.inc.
//
// Scores: blocks are read four at a time (a quad, 128 quants) in a split layout — one 64-byte
// vector holds the first 16 quants of each of the four blocks (block L in 128-bit lane L), a
// second their last 16 — so two vpdpbusd leave each block's partial sums of one token in its own
// lane, and sixteen tokens' vectors reduce by unpacks and adds (36 instructions) to four vectors
// whose lane 4L + i is block L's exact integer sum for token 4j + i. Only then are the sums
// scaled (both blocks' scales, one multiply-add a lane), so the per-token, per-head cost is two
// vpdpbusd and a few shuffles instead of a horizontal sum per token. A key row's quad is put in
// that layout once per block of tokens, shared by the group's heads: two 64-byte loads and a
// word permute (vpermt2w) per half, the blocks' 16-byte runs being whole words. vpdpbusd
// multiplies unsigned by signed bytes: the keys are made unsigned (q8_0: quant + 128, q4_0: the
// stored nibble, quant + 8) and what that adds (offset × the query block's sum) is subtracted
// from each block sum exactly.
//
// Values: the rows' block scales go into the weights (softmax weight × scale, sixteen tokens a
// multiply); each row's quants are widened to f32 in registers as they are added, once for up
// to four heads whose accumulators (64 columns each) stay in registers across the block.
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
#include "kernels/decode_attention_math16.inc"

static_assert(kBlock == 16, "a block of tokens is one 16-lane vector of scores");

constexpr int64_t kQuadBlocks = 4;
constexpr int64_t kQuadBytes = kQuadBlocks * kQB;  // 128
// A query row's quad: quants (split layout, 32 floats' room), lane scales [16], lane
// corrections [16] (int32).
constexpr int64_t kPackedQuadFloats = kQuadBytes / 4 + 16 + 16;

int64_t quads_of(int64_t blocks) { return (blocks + kQuadBlocks - 1) / kQuadBlocks; }
int64_t value_blocks(const DecodeParams& p) { return (p.value_width + kQB - 1) / kQB; }

int64_t packed_query_floats(int64_t rows, int64_t blocks) {
  return rows * quads_of(blocks) * kPackedQuadFloats;
}

// Each query row's quads: bytes [0, 64) hold block L's quants 0..15 at 16·L, [64, 128) its
// quants 16..31; then lane 4L + i = block L's scale; then lane 4L + i = offset × the sum of
// block L's quants, offset being what the keys' unsigned form adds to each quant (128 for q8_0,
// 8 for q4_0). Blocks past the row are zero.
void pack_queries(Int8Context& c, DType dtype, float* at) {
  const DecodeParams& p = *c.p;
  const int64_t rows = p.n_seqs * p.n_heads, quads = quads_of(c.blocks);
  const int32_t offset = dtype == DType::kQ8_0 ? 128 : 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < quads; ++k) {
      float* dst = at + (r * quads + k) * kPackedQuadFloats;
      auto* bytes = reinterpret_cast<int8_t*>(dst);
      float* lane_scales = dst + kQuadBytes / 4;
      auto* corrections = reinterpret_cast<int32_t*>(lane_scales + 16);
      for (int64_t L = 0; L < kQuadBlocks; ++L) {
        const int64_t block = k * kQuadBlocks + L;
        const bool present = block < c.blocks;
        int32_t sum = 0;
        if (present) {
          const int8_t* quants = c.q_quants + (r * c.blocks + block) * kQB;
          std::memcpy(bytes + 16 * L, quants, 16);
          std::memcpy(bytes + 64 + 16 * L, quants + 16, 16);
          for (int64_t i = 0; i < kQB; ++i) sum += quants[i];
        } else {
          std::memset(bytes + 16 * L, 0, 16);
          std::memset(bytes + 64 + 16 * L, 0, 16);
        }
        for (int64_t i = 0; i < 4; ++i) {
          lane_scales[4 * L + i] = present ? c.q_scales[r * c.blocks + block] : 0.0f;
          corrections[4 * L + i] = offset * sum;
        }
      }
    }
  }
}

uint16_t f16_bits_at(const std::byte* at) {
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return bits;
}

// Word indices that gather a whole quad (four blocks: the f16 scale, then the quants) from two
// 64-byte loads, at byte offsets `first` and `second` of the quad: its 16-byte runs of quants
// 0..15 (lo) and 16..31 (hi) into the split layout (block L's run in 128-bit lane L), and its
// scales into words 0..3. Blocks start at even bytes, so every run is whole words.
struct QuadIndex {
  uint16_t lo[32];
  uint16_t hi[32];
  uint16_t scales[32];
};

constexpr uint16_t word_at(int byte, int first, int second) {
  return static_cast<uint16_t>(byte < first + 64 ? (byte - first) / 2 : 32 + (byte - second) / 2);
}

// lo and scales from loads at (lo_first, lo_second), hi from (hi_first, hi_second)
constexpr QuadIndex quad_index(int block_size, int lo_first, int lo_second, int hi_first,
                               int hi_second) {
  QuadIndex x{};
  for (int L = 0; L < kQuadBlocks; ++L) {
    for (int i = 0; i < 8; ++i) {
      x.lo[8 * L + i] = word_at(block_size * L + 2 + 2 * i, lo_first, lo_second);
      x.hi[8 * L + i] = word_at(block_size * L + 2 + 16 + 2 * i, hi_first, hi_second);
    }
    x.scales[L] = word_at(block_size * L, lo_first, lo_second);
  }
  return x;
}

// q8_0: a quad is 136 bytes — lo and scales from bytes 0..127, hi from 16..79 and 72..135.
// q4_0: 72 bytes, one run of nibbles a block (lo) — from bytes 0..63 and 8..71.
constexpr QuadIndex kQ8_0Index = quad_index(block_bytes<DType::kQ8_0>(), 0, 64, 16, 72);
constexpr QuadIndex kQ4_0Index = quad_index(block_bytes<DType::kQ4_0>(), 0, 8, 0, 8);

// The 32 word indices of one vpermw / vpermt2w.
struct WordIndex {
  uint16_t word[32];
};

// Sixteen tokens' scale words [t][L] (two vectors: tokens 0..7, 8..15) to lanes 4L + i = token
// 4j + i: words j = 0, 1 from the first vector, 2, 3 from the second.
constexpr WordIndex scale_transpose() {
  WordIndex x{};
  for (uint16_t j = 0; j < 2; ++j) {
    for (uint16_t L = 0; L < 4; ++L) {
      for (uint16_t i = 0; i < 4; ++i) {
        x.word[16 * j + 4 * L + i] = static_cast<uint16_t>(16 * j + 4 * i + L);
      }
    }
  }
  return x;
}

constexpr WordIndex kScaleTranspose = scale_transpose();

// A key row's whole quad (four blocks from `quad`) in the split layout, made unsigned, into
// out[0, 128); its blocks' scale bits to scale_bits[0..3].
template <DType D>
void pack_key_quad(const std::byte* quad, uint8_t* out, uint16_t* scale_bits) {
  const QuadIndex& index = D == DType::kQ8_0 ? kQ8_0Index : kQ4_0Index;
  __m512i lo, hi, a, b;
  if constexpr (D == DType::kQ8_0) {
    a = _mm512_loadu_si512(quad);
    b = _mm512_loadu_si512(quad + 64);
    const __m512i c = _mm512_loadu_si512(quad + 16), d = _mm512_loadu_si512(quad + 72);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    lo = _mm512_xor_si512(_mm512_permutex2var_epi16(a, _mm512_loadu_si512(index.lo), b), flip);
    hi = _mm512_xor_si512(_mm512_permutex2var_epi16(c, _mm512_loadu_si512(index.hi), d), flip);
  } else {  // low nibbles are a block's quants 0..15, high nibbles 16..31
    a = _mm512_loadu_si512(quad);
    b = _mm512_loadu_si512(quad + 8);
    const __m512i packed = _mm512_permutex2var_epi16(a, _mm512_loadu_si512(index.lo), b);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    lo = _mm512_and_si512(packed, nibble);
    hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
  }
  const __m512i scales = _mm512_permutex2var_epi16(a, _mm512_loadu_si512(index.scales), b);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(scale_bits), _mm512_castsi512_si128(scales));
  _mm512_storeu_si512(out, lo);
  _mm512_storeu_si512(out + 64, hi);
}

// pack_key_quad for a row's last, partial quad (count < 4 blocks; none: no row), zero for the
// missing blocks: the same permutes over loads masked to the row's bytes (which a row of d_h 64,
// two blocks, always takes), so nothing past the row is read.
template <DType D>
void pack_partial_quad(const std::byte* quad, int64_t count, uint8_t* out, uint16_t* scale_bits) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(D == DType::kQ8_0 ? 0x80 : 0));
  if (quad == nullptr || count == 0) {
    for (int64_t L = 0; L < kQuadBlocks; ++L) scale_bits[L] = 0;
    _mm512_storeu_si512(out, flip);
    _mm512_storeu_si512(out + 64, flip);
    return;
  }
  const QuadIndex& index = D == DType::kQ8_0 ? kQ8_0Index : kQ4_0Index;
  const int64_t bytes = count * block_bytes<D>();
  // bytes [from, from + 64) of the quad, zero past its blocks
  const auto load = [&](int64_t from) {
    const int64_t left = std::clamp<int64_t>(bytes - from, 0, 64);
    const __mmask64 mask = left == 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    return _mm512_maskz_loadu_epi8(mask, quad + from);
  };
  const __mmask32 lanes = (__mmask32{1} << (8 * count)) - 1;  // 8 words a block
  __m512i lo, hi, a, b;
  if constexpr (D == DType::kQ8_0) {
    a = load(0);
    b = load(64);
    lo = _mm512_xor_si512(
        _mm512_maskz_permutex2var_epi16(lanes, a, _mm512_loadu_si512(index.lo), b), flip);
    hi = _mm512_xor_si512(
        _mm512_maskz_permutex2var_epi16(lanes, load(16), _mm512_loadu_si512(index.hi), load(72)),
        flip);
  } else {
    a = load(0);
    b = load(8);
    const __m512i packed =
        _mm512_maskz_permutex2var_epi16(lanes, a, _mm512_loadu_si512(index.lo), b);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    lo = _mm512_and_si512(packed, nibble);
    hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
  }
  const __m512i scales = _mm512_maskz_permutex2var_epi16((__mmask32{1} << count) - 1, a,
                                                         _mm512_loadu_si512(index.scales), b);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(scale_bits), _mm512_castsi512_si128(scales));
  _mm512_storeu_si512(out, lo);
  _mm512_storeu_si512(out + 64, hi);
}

// A quad's four scale words (zero past its `count` blocks; none: no row) to scale_bits[0..3].
template <DType D>
void quad_scales(const std::byte* quad, int64_t count, uint16_t* scale_bits) {
  if (count == kQuadBlocks) {
    const QuadIndex& index = D == DType::kQ8_0 ? kQ8_0Index : kQ4_0Index;
    const __m512i a = _mm512_loadu_si512(quad);
    const __m512i b = _mm512_loadu_si512(quad + (D == DType::kQ8_0 ? 64 : 8));
    const __m512i scales = _mm512_permutex2var_epi16(a, _mm512_loadu_si512(index.scales), b);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(scale_bits), _mm512_castsi512_si128(scales));
    return;
  }
  for (int64_t L = 0; L < kQuadBlocks; ++L) {
    scale_bits[L] = L < count ? f16_bits_at(quad + L * block_bytes<D>()) : 0;
  }
}

// Sixteen tokens' scale words [t][L] (two vectors: tokens 0..7, 8..15) to [L][t]: blocks L and
// L + 1 of the answer for half = L / 2.
constexpr WordIndex token_lanes(int half) {
  WordIndex x{};
  for (int L = 2 * half; L < 2 * half + 2; ++L) {
    for (int t = 0; t < 16; ++t) {
      x.word[16 * (L - 2 * half) + t] =
          static_cast<uint16_t>(t < 8 ? 4 * t + L : 32 + 4 * (t - 8) + L);
    }
  }
  return x;
}

constexpr WordIndex kTokenLanes[2] = {token_lanes(0), token_lanes(1)};

// Sixteen tokens' block sums: v[t] lane 4L + i (i < 4) is a partial sum of block L for token t;
// x[j] lane 4L + i becomes block L's whole sum for token 4j + i.
void block_sums(const __m512i* v, __m512i* x) {
  __m512i w[8];
  for (int i = 0; i < 8; ++i) {  // lanes [t0 p0+p2, t1 p0+p2, t0 p1+p3, t1 p1+p3] a block
    w[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  for (int j = 0; j < 4; ++j) {
    x[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(w[2 * j], w[2 * j + 1]),
                            _mm512_unpackhi_epi64(w[2 * j], w[2 * j + 1]));
  }
}

// f[j] lane 4L + i: block L's part of token 4j + i's score; the sixteen scores in token order.
__m512 token_scores(const __m512* f) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(f[0], f[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(f[0], f[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(f[2], f[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(f[2], f[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

// softmax_block (decode_attention_int8_common.inc) with a head's sixteen scores in one vector,
// four heads at a time (their reductions and exponentials interleaved; a missing fourth head
// repeats the last one and is not written back).
void softmax16(float* scores, int64_t n, int64_t heads, float* partial, int64_t stride,
               float* alpha) {
  const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
  const __m512 neg = _mm512_set1_ps(-INFINITY);
  for (int64_t h0 = 0; h0 < heads; h0 += 4) {
    const int64_t m = std::min<int64_t>(4, heads - h0);
    __m512 x[4];
    alignas(16) float old[4], sum[4];
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t hh = h0 + std::min(i, m - 1);
      x[i] = _mm512_mask_loadu_ps(neg, valid, scores + hh * kBlock);
      old[i] = partial[hh * stride];
    }
    const __m128 old4 = _mm_load_ps(old);
    alignas(16) float top[4];
    _mm_store_ps(top, _mm_max_ps(old4, reduce4<true>(x)));
    __m512 e[4];
    for (int i = 0; i < 4; ++i) e[i] = exp512(_mm512_sub_ps(x[i], _mm512_set1_ps(top[i])));
    // the first block's running maximum is −inf: exp512 gives 0 below −87
    alignas(16) float rescale[4];
    _mm_store_ps(rescale, _mm512_castps512_ps128(
                              exp512(_mm512_zextps128_ps512(_mm_sub_ps(old4, _mm_load_ps(top))))));
    _mm_store_ps(sum, reduce4<false>(e));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t hh = h0 + i;
      _mm512_storeu_ps(scores + hh * kBlock, e[i]);
      float* ph = partial + hh * stride;
      alpha[hh] = rescale[i];
      ph[1] = ph[1] * rescale[i] + sum[i];
      ph[0] = top[i];
    }
  }
}

// The group's scratch, in floats: packed keys [quads][kBlock][128 B], their scale bits
// [quads][kBlock][4] and the same as f32 lanes [quads][4][16] (block_sums' order), the value
// rows' scale bits [value quads][kBlock][4] and [value quads · 4][kBlock], widened value rows
// [kBlock][value_stride] (widens_once), scores
// [heads][kBlock], weights [heads][value blocks][kBlock], alpha [heads].
struct GroupScratch {
  uint8_t* keys;
  uint16_t* key_scale_bits;
  float* key_scales;
  uint16_t* value_scale_bits;
  uint16_t* value_scales;
  float* values;  // [kBlock][value_stride] widened rows, or null (widens_once)
  float* scores;
  float* alpha;
  float* weights;
};

// More heads a group than one pass of the value loop takes: the rows are widened once into
// scratch rather than once per pass.
constexpr int64_t kPassHeads = 4;  // add_values is instantiated for 1 … 4 heads
bool widens_once(const DecodeParams& p) { return p.n_heads / p.n_groups > kPassHeads; }
// A widened value row's floats: whole 64-column chunks, so the value loop never reads past it.
int64_t value_stride_floats(int64_t value_blocks) { return (value_blocks * kQB + 63) / 64 * 64; }
int64_t value_stride(const DecodeParams& p) { return value_stride_floats(value_blocks(p)); }

int64_t group_scratch_floats(const DecodeParams& p, int64_t blocks) {
  const int64_t quads = quads_of(blocks), heads = p.n_heads / p.n_groups;
  const int64_t vb = value_blocks(p), vquads = quads_of(vb);
  return quads * kBlock * kQuadBytes / 4 + quads * 64 / 2 + quads * 64 + vquads * 64 +
         (widens_once(p) ? kBlock * value_stride(p) : 0) + heads * kBlock + heads * vb * kBlock +
         heads;
}

GroupScratch carve(const DecodeParams& p, int64_t blocks, float* at) {
  const int64_t quads = quads_of(blocks), heads = p.n_heads / p.n_groups;
  const int64_t vb = value_blocks(p), vquads = quads_of(vb);
  GroupScratch s;
  s.keys = reinterpret_cast<uint8_t*>(at);
  at += quads * kBlock * kQuadBytes / 4;
  s.key_scale_bits = reinterpret_cast<uint16_t*>(at);
  at += quads * 64 / 2;
  s.key_scales = at;
  at += quads * 64;
  s.value_scale_bits = reinterpret_cast<uint16_t*>(at);
  at += vquads * 64 / 2;
  s.value_scales = reinterpret_cast<uint16_t*>(at);
  at += vquads * 64 / 2;
  s.values = widens_once(p) ? at : nullptr;
  at += widens_once(p) ? kBlock * value_stride(p) : 0;
  s.scores = at;
  s.weights = s.scores + heads * kBlock;
  s.alpha = s.weights + heads * vb * kBlock;
  return s;
}

// A value block's 32 quants as f32 (without its scale): quants 0..15, then 16..31.
template <DType D>
void widen_block(const std::byte* block, __m512& lo, __m512& hi) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
  if constexpr (D == DType::kQ8_0) {
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(raw));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + kQB / 2))));
  } else {  // low nibbles are quants 0..15, high nibbles 16..31, each stored + 8
    const __m128i nibble = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(raw, nibble), eight)));
    hi = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), nibble), eight)));
  }
}

// Heads' accumulators (part: the first head's [max, sum, accumulator], the next `stride` floats
// on) rescaled by alpha and given Σ_t weight · value over the n value rows, 64 columns (two
// blocks) at a time, each row widened in registers. weights: [NH][vb][kBlock] (softmax weight ×
// the row's block scale). widened: the rows as f32 [kBlock][value_stride] when the group's
// heads take several passes, else null (each pass widens in registers). ahead: rows to
// prefetch, one a token (ahead_n of them).
template <DType D, int NH>
void add_values(float* part, int64_t stride, const float* alpha, const float* weights, int64_t vb,
                const std::byte* const* rows, const float* widened, int64_t vw, int64_t n,
                const std::byte* const* ahead, int64_t ahead_n) {
  for (int64_t c0 = 0; c0 < vw; c0 += 64) {
    __mmask16 mask[4];
    for (int v = 0; v < 4; ++v) {
      const int64_t cols = vw - c0 - 16 * v;
      mask[v] = cols >= 16  ? __mmask16(0xFFFF)
                : cols <= 0 ? __mmask16(0)
                            : __mmask16((1u << cols) - 1);
    }
    // a chunk with one block reads it twice; the second copy lands in masked-off columns
    const int64_t b0 = c0 / kQB, b1 = std::min(b0 + 1, vb - 1);
    __m512 acc[NH][4];
    for (int h = 0; h < NH; ++h) {
      const __m512 a = _mm512_set1_ps(alpha[h]);
      for (int v = 0; v < 4; ++v) {
        acc[h][v] =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(mask[v], part + h * stride + 2 + c0 + 16 * v), a);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      if (c0 == 0 && t < ahead_n) prefetch_row(ahead[t], block_bytes<D>() * vb);
      __m512 x0, x1, x2, x3;
      if (widened != nullptr) {
        const float* x = widened + t * value_stride_floats(vb) + c0;
        x0 = _mm512_loadu_ps(x);
        x1 = _mm512_loadu_ps(x + 16);
        x2 = _mm512_loadu_ps(x + 32);
        x3 = _mm512_loadu_ps(x + 48);
      } else {
        widen_block<D>(rows[t] + b0 * block_bytes<D>(), x0, x1);
        widen_block<D>(rows[t] + b1 * block_bytes<D>(), x2, x3);
      }
      for (int h = 0; h < NH; ++h) {
        const __m512 w0 = _mm512_set1_ps(weights[(h * vb + b0) * kBlock + t]);
        const __m512 w1 = _mm512_set1_ps(weights[(h * vb + b1) * kBlock + t]);
        acc[h][0] = _mm512_fmadd_ps(x0, w0, acc[h][0]);
        acc[h][1] = _mm512_fmadd_ps(x1, w0, acc[h][1]);
        acc[h][2] = _mm512_fmadd_ps(x2, w1, acc[h][2]);
        acc[h][3] = _mm512_fmadd_ps(x3, w1, acc[h][3]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      for (int v = 0; v < 4; ++v) {
        _mm512_mask_storeu_ps(part + h * stride + 2 + c0 + 16 * v, mask[v], acc[h][v]);
      }
    }
  }
}

// The group's key rows of one block (n tokens) into the split layout and their scales into
// f32 lanes (block_sums' order); past n, zero keys and scales (scores of 0, never used). The
// unit after next's key rows (next) are asked for a row at a time on the way.
template <DType D>
void pack_keys(const Int8Context& c, int64_t g, const BlockRows& block, int64_t n,
               const FarRows& next, const GroupScratch& s) {
  const DecodeParams& p = *c.p;
  const int64_t quads = quads_of(c.blocks);
  const int64_t key_row = row_bytes(D, p.key_width);
  const std::byte* key_rows[kBlock];
  for (int64_t t = 0; t < n; ++t) key_rows[t] = block.keys[t] + g * block.key_group_bytes;
  for (int64_t k = 0; k < quads; ++k) {
    const int64_t count = std::min(kQuadBlocks, c.blocks - k * kQuadBlocks);
    uint8_t* out = s.keys + k * kBlock * kQuadBytes;
    uint16_t* bits = s.key_scale_bits + k * kBlock * kQuadBlocks;
    const int64_t offset = k * kQuadBlocks * block_bytes<D>();
    if (count == kQuadBlocks) {
      for (int64_t t = 0; t < n; ++t) {
        if (k == 0 && t < next.n) prefetch_row(next.keys[t], key_row);
        pack_key_quad<D>(key_rows[t] + offset, out + t * kQuadBytes, bits + t * kQuadBlocks);
      }
    } else {
      for (int64_t t = 0; t < n; ++t) {
        if (k == 0 && t < next.n) prefetch_row(next.keys[t], key_row);
        pack_partial_quad<D>(key_rows[t] + offset, count, out + t * kQuadBytes,
                             bits + t * kQuadBlocks);
      }
    }
    for (int64_t t = n; t < kBlock; ++t) {
      pack_partial_quad<D>(nullptr, 0, out + t * kQuadBytes, bits + t * kQuadBlocks);
    }
  }
  const __m512i transpose = _mm512_loadu_si512(kScaleTranspose.word);
  for (int64_t k = 0; k < quads; ++k) {
    for (int half = 0; half < 2; ++half) {
      const __m512i words = _mm512_permutexvar_epi16(
          transpose, _mm512_loadu_si512(s.key_scale_bits + k * 64 + 32 * half));
      _mm512_storeu_ps(s.key_scales + k * 64 + 32 * half,
                       _mm512_cvtph_ps(_mm512_castsi512_si256(words)));
      _mm512_storeu_ps(s.key_scales + k * 64 + 32 * half + 16,
                       _mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1)));
    }
  }
}

// s.scores [heads][kBlock] of the packed block for query rows row0 … row0 + heads − 1: content
// (exact integer block sums × both scales), plus the rope slice (ropes: [rw][kBlock]), scaled.
void score_heads(const Int8Context& c, int64_t row0, int64_t heads, const float* ropes,
                 const GroupScratch& s) {
  const DecodeParams& p = *c.p;
  const int64_t rw = p.rope_width, quads = quads_of(c.blocks);
  for (int64_t hh = 0; hh < heads; ++hh) {
    const int64_t row = row0 + hh;
    __m512 f[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    for (int64_t k = 0; k < quads; ++k) {
      const float* q = c.packed + (row * quads + k) * kPackedQuadFloats;
      const __m512i q0 = _mm512_loadu_si512(q), q1 = _mm512_loadu_si512(q + 16);
      const uint8_t* keys = s.keys + k * kBlock * kQuadBytes;
      __m512i v[kBlock];
      for (int t = 0; t < kBlock; ++t) {
        const __m512i lo = _mm512_loadu_si512(keys + t * kQuadBytes);
        const __m512i hi = _mm512_loadu_si512(keys + t * kQuadBytes + 64);
        v[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, q0), hi, q1);
      }
      __m512i x[4];
      block_sums(v, x);
      const __m512 q_scales = _mm512_loadu_ps(q + kQuadBytes / 4);
      const __m512i corrections = _mm512_loadu_si512(q + kQuadBytes / 4 + 16);
      for (int j = 0; j < 4; ++j) {
        const __m512 k_scales = _mm512_loadu_ps(s.key_scales + k * 64 + j * 16);
        f[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(x[j], corrections)),
                               _mm512_mul_ps(k_scales, q_scales), f[j]);
      }
    }
    __m512 scores = token_scores(f);
    const float* q_rope = rw > 0 ? p.q_rope + row * rw : nullptr;
    for (int64_t j = 0; j < rw; ++j) {
      scores =
          _mm512_fmadd_ps(_mm512_set1_ps(q_rope[j]), _mm512_loadu_ps(ropes + j * kBlock), scores);
    }
    _mm512_storeu_ps(s.scores + hh * kBlock, _mm512_mul_ps(scores, _mm512_set1_ps(p.scale)));
  }
}

// s.weights [heads][value blocks][kBlock]: each head's softmax weights × the value rows' block
// scales (past n: scale 0). A one-stream cache's value rows are its key rows, whose scale words
// pack_keys already unpacked.
template <DType D>
void value_weights(const DecodeParams& p, int64_t heads, const std::byte* const* rows, int64_t n,
                   bool same_rows, const GroupScratch& s) {
  const int64_t vb = value_blocks(p), vquads = quads_of(vb);
  const uint16_t* value_bits = same_rows ? s.key_scale_bits : s.value_scale_bits;
  if (!same_rows) {
    for (int64_t k = 0; k < vquads; ++k) {
      const int64_t count = std::min(kQuadBlocks, vb - k * kQuadBlocks);
      const int64_t offset = k * kQuadBlocks * block_bytes<D>();
      uint16_t* bits = s.value_scale_bits + k * kBlock * kQuadBlocks;
      for (int64_t t = 0; t < kBlock; ++t) {
        quad_scales<D>(t < n ? rows[t] + offset : nullptr, t < n ? count : 0,
                       bits + t * kQuadBlocks);
      }
    }
  }
  for (int64_t k = 0; k < vquads; ++k) {
    const __m512i r0 = _mm512_loadu_si512(value_bits + k * 64);
    const __m512i r1 = _mm512_loadu_si512(value_bits + k * 64 + 32);
    _mm512_storeu_si512(s.value_scales + k * 64,
                        _mm512_permutex2var_epi16(r0, _mm512_loadu_si512(kTokenLanes[0].word), r1));
    _mm512_storeu_si512(s.value_scales + k * 64 + 32,
                        _mm512_permutex2var_epi16(r0, _mm512_loadu_si512(kTokenLanes[1].word), r1));
  }
  for (int64_t k = 0; k < vb; ++k) {
    const __m512 d = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.value_scales + k * kBlock)));
    for (int64_t hh = 0; hh < heads; ++hh) {
      _mm512_storeu_ps(s.weights + (hh * vb + k) * kBlock,
                       _mm512_mul_ps(_mm512_loadu_ps(s.scores + hh * kBlock), d));
    }
  }
}

// One block of n tokens for group g of sequence b: scores, the online softmax, the values
// (part: the group's first head's [max, sum, accumulator]).
template <DType D>
void group_tile(const Int8Context& c, int64_t b, int64_t g, const BlockRows& block, int64_t n,
                const FarRows& next, const float* ropes, float* part, float* scratch) {
  const DecodeParams& p = *c.p;
  const int64_t G = p.n_groups, heads = p.n_heads / G, vw = p.value_width;
  const int64_t vb = value_blocks(p);
  const int64_t key_row = row_bytes(D, p.key_width), value_row = row_bytes(D, vw);
  const GroupScratch s = carve(p, c.blocks, scratch);
  pack_keys<D>(c, g, block, n, next, s);
  score_heads(c, b * p.n_heads + g * heads, heads, ropes, s);
  softmax16(s.scores, n, heads, part, 2 + vw, s.alpha);

  const std::byte* rows[kBlock];
  for (int64_t t = 0; t < kBlock; ++t) {
    rows[t] = t < n ? block.values[t] + g * block.value_group_bytes : nullptr;
  }
  const bool same_rows = p.value_pool == p.key_pool && value_row == key_row;
  value_weights<D>(p, heads, rows, n, same_rows, s);
  // the unit after next's value rows (none for a one-stream cache: the keys were)
  const std::byte* ahead[kBlock];
  const int64_t ahead_n = same_rows ? 0 : next.n;
  for (int64_t t = 0; t < ahead_n; ++t) ahead[t] = next.values[t];
  if (s.values != nullptr) {  // several passes of heads: widen each row once
    const int64_t vstride = value_stride(p);
    for (int64_t t = 0; t < n; ++t) {
      float* out = s.values + t * vstride;
      for (int64_t k = 0; k < vb; ++k) {
        __m512 lo, hi;
        widen_block<D>(rows[t] + k * block_bytes<D>(), lo, hi);
        _mm512_storeu_ps(out + k * kQB, lo);
        _mm512_storeu_ps(out + k * kQB + 16, hi);
      }
      for (int64_t i = vb * kQB; i < vstride; i += 16) {
        _mm512_storeu_ps(out + i, _mm512_setzero_ps());
      }
    }
  }
  const int64_t stride = 2 + vw;
  for (int64_t h0 = 0; h0 < heads; h0 += kPassHeads) {
    float* at = part + h0 * stride;
    const float* alpha = s.alpha + h0;
    const float* weights = s.weights + h0 * vb * kBlock;
    const int64_t m = h0 == 0 ? ahead_n : 0;
    switch (std::min(kPassHeads, heads - h0)) {
      case 4:
        add_values<D, 4>(at, stride, alpha, weights, vb, rows, s.values, vw, n, ahead, m);
        break;
      case 3:
        add_values<D, 3>(at, stride, alpha, weights, vb, rows, s.values, vw, n, ahead, m);
        break;
      case 2:
        add_values<D, 2>(at, stride, alpha, weights, vb, rows, s.values, vw, n, ahead, m);
        break;
      default:
        add_values<D, 1>(at, stride, alpha, weights, vb, rows, s.values, vw, n, ahead, m);
        break;
    }
  }
}

#include "kernels/decode_attention_int8.inc"

}  // namespace

void decode_attention_int8_avx512(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work) {
  decode_int8(p, pool, work);
}

}  // namespace kvlab
