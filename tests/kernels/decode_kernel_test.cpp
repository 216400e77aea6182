// The vector flash-decoding kernels (AVX2, AVX-512, AMX; each case names its level, and skips
// with the reason where this CPU lacks it) against the scalar reference on random caches of
// awkward shapes. Each case prints as a replayable name: T97_H6_G2_k90_v90_r0_bf16_page16_seed3.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "cache/paged_cache.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/kernel_test_cache.h"
#include "kernels/rows_in_the_job.h"

namespace kvlab {
namespace {

struct Case {
  std::vector<int64_t> lengths;  // tokens per sequence in the batch
  int64_t heads = 0, groups = 0, key_width = 0, value_width = 0, rope_width = 0;
  DType dtype = DType::kF32;
  int64_t page = 16;  // tokens a cache page
  bool rope_on_read = false;
  bool norm = false;
  uint32_t seed = 1;
  bool rebuild = false;  // gva dr=0: keys rebuilt from value rows through per-head maps
  AttnPrecision precision = AttnPrecision::kF32;
  bool yarn = false;  // keys rotated on read with yarn frequencies and a cos/sin factor of 1.2
  KeyOrder key_order = KeyOrder::kRows;  // kTokenPairs: two-stream bf16 only

  std::string name() const {
    std::string out = "T";
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (i > 0) out.append("_");
      out.append(std::to_string(lengths[i]));
    }
    for (auto [tag, value] : {std::pair<const char*, int64_t>{"_H", heads},
                              {"_G", groups},
                              {"_k", key_width},
                              {"_v", value_width},
                              {"_r", rope_width}}) {
      out.append(tag).append(std::to_string(value));
    }
    out.append("_").append(dtype_name(dtype)).append("_page").append(std::to_string(page));
    if (rope_on_read) out.append("_ropeonread");
    if (norm) out.append("_norm");
    if (rebuild) out.append("_rebuild");
    if (yarn) out.append("_yarn");
    if (key_order != KeyOrder::kRows) out.append("_keys").append(key_order_name(key_order));
    if (precision != AttnPrecision::kF32) out.append("_").append(attn_precision_name(precision));
    return out.append("_seed").append(std::to_string(seed));
  }
};

double tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 2e-5; }

// Runs one case through both kernels; `one_stream` shares one pool for keys and values.
void check(const Case& c, bool one_stream, CpuIsa isa) {
  SCOPED_TRACE(c.name() + (one_stream ? "_onestream_" : "_twostream_") +
               std::string(cpu_isa_name(isa)));
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  CacheLayout layout = kernel_test_layout(c.dtype, one_stream, c.groups, c.key_width, c.value_width,
                                          c.rope_width, c.rebuild);
  const bool pairs = c.key_order == KeyOrder::kTokenPairs;
  CacheLayout rows_layout = layout;  // keys ordered by pairs: the same rows in row order too
  layout.key_order = c.key_order;
  int64_t total_pages = 0;
  for (int64_t l : c.lengths) total_pages += (l + c.page - 1) / c.page;
  const int64_t n_seqs = static_cast<int64_t>(c.lengths.size());
  PagedKvCache cache(layout, 1, c.page, total_pages + 2, n_seqs);
  PagedKvCache rows_cache(rows_layout, 1, c.page, pairs ? total_pages + 2 : 0, n_seqs);
  std::vector<int32_t> seqs;
  for (int64_t len : c.lengths) {
    const int32_t seq = cache.add_sequence();
    cache.append(seq, len);
    if (pairs) rows_cache.append(rows_cache.add_sequence(), len);
    seqs.push_back(seq);
    for (int64_t pos = 0; pos < len; ++pos) {
      for (size_t s = 0; s < layout.streams.size(); ++s) {
        const CacheStream& st = layout.streams[s];
        std::vector<float> row(static_cast<size_t>(st.width()));
        for (float& x : row) x = uniform(rng);
        cache.store_token(0, static_cast<int64_t>(s), seq, pos, row.data());
        if (pairs) rows_cache.store_token(0, static_cast<int64_t>(s), seq, pos, row.data());
      }
    }
  }
  const int64_t n = static_cast<int64_t>(c.lengths.size());
  const int64_t vw = one_stream && !c.rebuild ? c.key_width : c.value_width;
  KernelTestQueries in(rng, n, c.heads, c.key_width, c.rope_width, vw, c.rebuild);
  const PageTable table = cache.page_table(seqs);
  DecodeParams p;
  p.q = in.q.data();
  p.q_rope = c.rope_width > 0 ? in.q_rope.data() : nullptr;
  point_at_pools(p, cache, one_stream, c.rope_width > 0);
  p.pages = table.view();
  p.n_seqs = n;
  p.n_heads = c.heads;
  p.n_groups = c.groups;
  p.key_width = c.key_width;
  p.value_width = vw;
  p.rope_width = c.rope_width;
  p.dtype = c.dtype;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.key_width + c.rope_width));
  p.rope_on_read = c.rope_on_read;
  if (c.yarn) {
    p.rope_scaling.kind = RopeScalingKind::kYarn;
    p.rope_scaling.factor = 4;
    p.rope_scaling.original_context = 64;
    p.rope_scaling.attention_factor = 1.2;
  }
  p.norm_weight = c.norm ? in.norm.data() : nullptr;
  p.key_maps = c.rebuild ? in.key_maps.data() : nullptr;
  p.precision = c.precision;
  p.key_order = c.key_order;
  std::vector<float> expected(static_cast<size_t>(n * c.heads * vw), -7.0f);
  std::vector<float> actual(expected.size(), -9.0f);
  p.out = expected.data();
  decode_attention_reference(p);
  if (pairs) {  // the reference reads either order to the same result, bit for bit
    std::vector<float> from_rows(expected.size(), -5.0f);
    DecodeParams r = p;
    r.key_pool = rows_cache.pool(0, 0);
    r.value_pool = rows_cache.pool(0, 1);
    r.key_order = KeyOrder::kRows;
    r.out = from_rows.data();
    decode_attention_reference(r);
    EXPECT_EQ(from_rows, expected) << "reference over key pairs != over key rows";
  }
  p.out = actual.data();
  FastDecoder fast(2, isa);
  fast.run(p);
  double worst = 0;
  std::vector<double> row_worst(static_cast<size_t>(n * c.heads), 0.0);  // per (sequence, head)
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << "NaN at " << i;
    const double d = std::fabs(actual[i] - expected[i]);
    worst = std::max(worst, d);
    row_worst[i / static_cast<size_t>(vw)] = std::max(row_worst[i / static_cast<size_t>(vw)], d);
  }
  if (effective_precision(p) == AttnPrecision::kF32) {
    EXPECT_LT(worst, tolerance(c.dtype));
  } else {
    // bf16 weights: the kernel and the reference round the same exp(s - m) to bf16, but their
    // f32 and double sums put a weight on the other side of a rounding boundary now and then
    // (one bf16 step, ≤ 2^-8 of that weight): most rows agree to f32 accumulation, none by
    // more than a few such steps (values lie in [-1, 1]).
    std::sort(row_worst.begin(), row_worst.end());
    EXPECT_LT(row_worst[row_worst.size() / 2], tolerance(c.dtype)) << "median row";
    EXPECT_LT(worst, 4e-3);
  }
  // steady state: a second run reuses the workspace and gives the same answer
  std::vector<float> again(expected.size());
  p.out = again.data();
  fast.run(p);
  EXPECT_EQ(again, actual);
}

// Every shape below on one SIMD kernel: lengths that end mid-block and mid-page, group sizes
// 1, 3 and 8 (one, a partial and two batches of heads), widths that are whole chunks, whole
// plus an 8-lane chunk plus a scalar tail (90), one- and two-stream, rope streams, RoPE on read.
void awkward_shapes(const std::function<void(const Case&, bool)>& each) {
  uint32_t seed = 0;
  for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16}) {
    for (std::vector<int64_t> lengths :
         {std::vector<int64_t>{1}, {7}, {97}, {1000, 0, 13}, {1500, 600}}) {
      for (auto [heads, groups] : {std::pair<int64_t, int64_t>{8, 8}, {6, 2}, {8, 1}}) {
        for (int64_t width : {64, 90, 128}) {
          Case c{.lengths = lengths,
                 .heads = heads,
                 .groups = groups,
                 .key_width = width,
                 .value_width = width,
                 .dtype = dtype};
          c.seed = ++seed;
          each(c, /*one_stream=*/false);
          each(c, /*one_stream=*/true);
        }
      }
    }
    // widths of 8-lane chunks only (24, 48), of two 16-lane chunks and one (96, 200 + tail)
    for (int64_t width : {24, 48, 96, 200}) {
      each({.lengths = {37, 300},
            .heads = 9,
            .groups = 1,
            .key_width = width,
            .value_width = width,
            .dtype = dtype,
            .seed = ++seed},
           false);
      each({.lengths = {300},
            .heads = 6,
            .groups = 2,
            .key_width = width,
            .value_width = width,
            .dtype = dtype,
            .seed = ++seed},
           true);
    }
    // gva (grouped content + shared rope stream) and absorbed mla (512 + 64)
    each({.lengths = {97, 1000},
          .heads = 32,
          .groups = 8,
          .key_width = 128,
          .value_width = 128,
          .rope_width = 16,
          .dtype = dtype,
          .seed = ++seed},
         true);
    each({.lengths = {1000, 5},
          .heads = 16,
          .groups = 1,
          .key_width = 512,
          .value_width = 512,
          .rope_width = 64,
          .dtype = dtype,
          .seed = ++seed},
         true);
    // more than 16 heads a group (the tile path takes them 16 at a time; 20 = 16 + 4)
    each({.lengths = {300, 41},
          .heads = 40,
          .groups = 2,
          .key_width = 64,
          .value_width = 64,
          .dtype = dtype,
          .seed = ++seed},
         false);
    each({.lengths = {300},
          .heads = 40,
          .groups = 2,
          .key_width = 64,
          .value_width = 64,
          .rope_width = 16,
          .dtype = dtype,
          .seed = ++seed},
         true);
    // rope widths that are not whole chunks
    each({.lengths = {300},
          .heads = 8,
          .groups = 2,
          .key_width = 64,
          .value_width = 64,
          .rope_width = 8,
          .dtype = dtype,
          .seed = ++seed},
         true);
    each({.lengths = {300},
          .heads = 8,
          .groups = 2,
          .key_width = 64,
          .value_width = 64,
          .rope_width = 48,
          .dtype = dtype,
          .seed = ++seed},
         true);
    // the shared K=V + RoPE layout (Lumma: 16 heads, 8 groups of 90), keys rotated on read
    each({.lengths = {97, 700},
          .heads = 16,
          .groups = 8,
          .key_width = 90,
          .value_width = 90,
          .dtype = dtype,
          .rope_on_read = true,
          .norm = true,
          .seed = ++seed},
         true);
    each({.lengths = {33},
          .heads = 4,
          .groups = 2,
          .key_width = 64,
          .value_width = 64,
          .dtype = dtype,
          .page = 1,
          .rope_on_read = true,
          .seed = ++seed},
         true);  // page size 1
    // gva dr=0: keys rebuilt per head and position (d_n 64 from d_h 90; d_n = d_h = 128)
    each({.lengths = {97, 600, 0},
          .heads = 6,
          .groups = 2,
          .key_width = 64,
          .value_width = 90,
          .dtype = dtype,
          .rope_on_read = true,
          .seed = ++seed,
          .rebuild = true},
         true);
    each({.lengths = {1100},
          .heads = 8,
          .groups = 8,
          .key_width = 128,
          .value_width = 128,
          .dtype = dtype,
          .rope_on_read = true,
          .seed = ++seed,
          .rebuild = true},
         true);
    // the same with yarn RoPE scaling: the fast kernels' rope table against the reference's
    // own frequencies and factor
    each({.lengths = {97, 700},
          .heads = 16,
          .groups = 8,
          .key_width = 90,
          .value_width = 90,
          .dtype = dtype,
          .rope_on_read = true,
          .norm = true,
          .seed = ++seed,
          .precision = AttnPrecision::kF32,
          .yarn = true},
         true);
    each({.lengths = {97, 600, 0},
          .heads = 6,
          .groups = 2,
          .key_width = 64,
          .value_width = 90,
          .dtype = dtype,
          .rope_on_read = true,
          .seed = ++seed,
          .rebuild = true,
          .precision = AttnPrecision::kF32,
          .yarn = true},
         true);
  }
}

// AttnPrecision::kBf16 (bf16 caches; keys rotated on read are rounded after the rotation)
// against the reference's roundings; shapes as above. Where bf16 precision does not apply
// (rebuilt keys, f32 and f16 caches) the call computes in f32 and must match the f32 reference.
void bf16_precision_shapes(const std::function<void(const Case&, bool)>& each) {
  uint32_t seed = 500;
  const auto bf16 = AttnPrecision::kBf16;
  for (std::vector<int64_t> lengths :
       {std::vector<int64_t>{1}, {7}, {97}, {1000, 0, 13}, {1500, 600}}) {
    for (auto [heads, groups] : {std::pair<int64_t, int64_t>{8, 8}, {6, 2}, {8, 1}}) {
      for (int64_t width : {64, 90, 128}) {
        Case c{.lengths = lengths,
               .heads = heads,
               .groups = groups,
               .key_width = width,
               .value_width = width,
               .dtype = DType::kBf16};
        c.seed = ++seed;
        c.precision = bf16;
        each(c, /*one_stream=*/false);
        each(c, /*one_stream=*/true);
      }
    }
  }
  for (int64_t width : {24, 48, 96, 200}) {
    each({.lengths = {37, 300},
          .heads = 9,
          .groups = 1,
          .key_width = width,
          .value_width = width,
          .dtype = DType::kBf16,
          .seed = ++seed,
          .precision = bf16},
         false);
    each({.lengths = {300},
          .heads = 6,
          .groups = 2,
          .key_width = width,
          .value_width = width,
          .dtype = DType::kBf16,
          .seed = ++seed,
          .precision = bf16},
         true);
  }
  // gva (dr 16, 8, 48), absorbed mla (512 + 64), more than 16 heads a group, page size 1
  for (int64_t rope : {16, 8, 48}) {
    each({.lengths = {97, 1000},
          .heads = 32,
          .groups = 8,
          .key_width = 128,
          .value_width = 128,
          .rope_width = rope,
          .dtype = DType::kBf16,
          .seed = ++seed,
          .precision = bf16},
         true);
  }
  each({.lengths = {1000, 5},
        .heads = 16,
        .groups = 1,
        .key_width = 512,
        .value_width = 512,
        .rope_width = 64,
        .dtype = DType::kBf16,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {300, 41},
        .heads = 40,
        .groups = 2,
        .key_width = 64,
        .value_width = 64,
        .dtype = DType::kBf16,
        .seed = ++seed,
        .precision = bf16},
       false);
  // 5, 6 and 7 heads a group: one value pass of that many heads after two score passes
  each({.lengths = {300, 41},
        .heads = 14,
        .groups = 2,
        .key_width = 96,
        .value_width = 96,
        .dtype = DType::kBf16,
        .seed = ++seed,
        .precision = bf16},
       false);
  each({.lengths = {97, 600},
        .heads = 6,
        .groups = 1,
        .key_width = 64,
        .value_width = 64,
        .rope_width = 16,
        .dtype = DType::kBf16,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {1000},
        .heads = 10,
        .groups = 2,
        .key_width = 72,
        .value_width = 72,
        .dtype = DType::kBf16,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {33, 70},
        .heads = 4,
        .groups = 2,
        .key_width = 64,
        .value_width = 64,
        .rope_width = 16,
        .dtype = DType::kBf16,
        .page = 1,
        .seed = ++seed,
        .precision = bf16},
       true);
  // keys rotated (and normalised) on read: the shared K=V + RoPE layout (16 heads, 8 groups of
  // 90; 4 heads, 2 groups of 64 without the norm; page size 1), and q-gqa:8's shape
  each({.lengths = {97, 700},
        .heads = 16,
        .groups = 8,
        .key_width = 90,
        .value_width = 90,
        .dtype = DType::kBf16,
        .rope_on_read = true,
        .norm = true,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {33, 300},
        .heads = 4,
        .groups = 2,
        .key_width = 64,
        .value_width = 64,
        .dtype = DType::kBf16,
        .page = 1,
        .rope_on_read = true,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {1000},
        .heads = 32,
        .groups = 8,
        .key_width = 128,
        .value_width = 128,
        .dtype = DType::kBf16,
        .rope_on_read = true,
        .norm = true,
        .seed = ++seed,
        .precision = bf16},
       true);
  each({.lengths = {97, 700},
        .heads = 16,
        .groups = 8,
        .key_width = 90,
        .value_width = 90,
        .dtype = DType::kBf16,
        .rope_on_read = true,
        .norm = true,
        .seed = ++seed,
        .precision = bf16,
        .yarn = true},
       true);
  // where it does not apply (rebuilt keys; f32 and f16 caches): f32
  each({.lengths = {97, 600, 0},
        .heads = 6,
        .groups = 2,
        .key_width = 64,
        .value_width = 90,
        .dtype = DType::kBf16,
        .rope_on_read = true,
        .seed = ++seed,
        .rebuild = true,
        .precision = bf16},
       true);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    each({.lengths = {97, 700},
          .heads = 8,
          .groups = 2,
          .key_width = 128,
          .value_width = 128,
          .rope_width = 16,
          .dtype = dtype,
          .seed = ++seed,
          .precision = bf16},
         true);
  }
}

// Keys ordered by element pairs (KeyOrder::kTokenPairs: two-stream bf16 caches), in `precision`:
// lengths that end mid-block and mid-page, pages of 16, 32 and 48 tokens, group sizes 1, 3, 4,
// 8 and 20 (one and several passes of heads), widths with an odd number of pairs (90, 26), one
// pair (2) and a wide one (200).
void pair_order_shapes(AttnPrecision precision,
                       const std::function<void(const Case&, bool)>& each) {
  uint32_t seed = precision == AttnPrecision::kBf16 ? 900 : 800;
  const DType bf16 = DType::kBf16;
  for (std::vector<int64_t> lengths :
       {std::vector<int64_t>{1}, {7}, {97}, {1000, 0, 13}, {1500, 600}}) {
    for (auto [heads, groups] : {std::pair<int64_t, int64_t>{8, 8}, {6, 2}, {8, 1}, {32, 8}}) {
      for (int64_t width : {64, 90, 128}) {
        Case c{.lengths = lengths,
               .heads = heads,
               .groups = groups,
               .key_width = width,
               .value_width = width,
               .dtype = bf16,
               .page = width == 90 ? 32 : 16};
        c.seed = ++seed;
        c.precision = precision;
        c.key_order = KeyOrder::kTokenPairs;
        each(c, /*one_stream=*/false);
      }
    }
  }
  for (auto [width, page] : {std::pair<int64_t, int64_t>{26, 48}, {200, 16}, {2, 16}}) {
    Case c{.lengths = {300, 41},
           .heads = 40,
           .groups = 2,
           .key_width = width,
           .value_width = width,
           .dtype = bf16,
           .page = page};
    c.seed = ++seed;
    c.precision = precision;
    c.key_order = KeyOrder::kTokenPairs;
    each(c, false);
  }
}

// How far bf16 arithmetic moves the output from f32, per variant shape, on random caches
// (values in [-1, 1]) with queries scaled so attention is peaked (|q| up to 12: a few tokens take
// most of the weight, as in trained models) and flat (|q| ≤ 1). Measured on Zen 5 (fast kernel)
// max |bf16 - f32| 2.8e-3 (mha) to 8.5e-3 (gva, mla) peaked, ~1e-4 flat; the bounds are ~3×
// that: 2.5e-2 peaked, 4e-4 flat (docs/kernels/decode-attention.md).
struct PrecisionShape {
  const char* name;
  int64_t heads, groups, width, rope;
  bool one_stream;
};

double bf16_error(const PrecisionShape& v, float query_scale, bool fast) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const CacheLayout layout =
      kernel_test_layout(DType::kBf16, v.one_stream, v.groups, v.width, v.width, v.rope);
  const int64_t tokens = 1500;
  PagedKvCache cache(layout, 1, 16, (tokens + 15) / 16 + 1, 1);
  const int32_t seq = cache.add_sequence();
  cache.append(seq, tokens);
  for (int64_t pos = 0; pos < tokens; ++pos) {
    for (size_t st = 0; st < layout.streams.size(); ++st) {
      const CacheStream& stream = layout.streams[st];
      std::vector<float> row(static_cast<size_t>(stream.width()));
      for (float& x : row) x = uniform(rng);
      cache.store_token(0, static_cast<int64_t>(st), seq, pos, row.data());
    }
  }
  std::vector<float> q(static_cast<size_t>(v.heads * v.width)),
      qr(static_cast<size_t>(v.heads * v.rope));
  for (float& x : q) x = query_scale * uniform(rng);
  for (float& x : qr) x = query_scale * uniform(rng);
  const PageTable table = cache.page_table({seq});
  DecodeParams p;
  p.q = q.data();
  p.q_rope = v.rope > 0 ? qr.data() : nullptr;
  point_at_pools(p, cache, v.one_stream, v.rope > 0);
  p.pages = table.view();
  p.n_seqs = 1;
  p.n_heads = v.heads;
  p.n_groups = v.groups;
  p.key_width = v.width;
  p.value_width = v.width;
  p.rope_width = v.rope;
  p.dtype = DType::kBf16;
  p.scale = 1.0f / std::sqrt(static_cast<float>(v.width + v.rope));
  std::vector<float> f32(static_cast<size_t>(v.heads * v.width)), bf16(f32.size());
  p.out = f32.data();
  decode_attention_reference(p);
  p.precision = AttnPrecision::kBf16;
  p.out = bf16.data();
  if (fast) {
    FastDecoder decoder(2);
    decoder.run(p);
  } else {
    decode_attention_reference(p);
  }
  double worst = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_FALSE(std::isnan(bf16[i]));
    worst = std::max(worst, static_cast<double>(std::fabs(bf16[i] - f32[i])));
  }
  return worst;
}

TEST(FastDecodeTest, Bf16PrecisionStaysWithinItsStatedErrorOfF32) {
  const PrecisionShape shapes[] = {{"gqa:8 (H 32, d_h 128)", 32, 8, 128, 0, false},
                                   {"gva:8,dr=16", 32, 8, 128, 16, true},
                                   {"mla 512+64, H 16", 16, 1, 512, 64, true},
                                   {"mha (H 8, d_h 64)", 8, 8, 64, 0, false}};
  const bool fast = FastDecoder(1).supports_bf16_precision();
  for (const PrecisionShape& v : shapes) {
    // peaked: |q| up to 12 gives scores with a spread of several units; flat: |q| ≤ 1
    const double peaked = bf16_error(v, 12.0f, fast), flat = bf16_error(v, 1.0f, fast);
    std::printf("bf16 vs f32, %s: max |Δ| %.2e (peaked), %.2e (flat)%s\n", v.name, peaked, flat,
                fast ? "" : " [reference]");
    EXPECT_LT(peaked, 2.5e-2) << v.name;
    EXPECT_LT(flat, 4e-4) << v.name;
    EXPECT_GT(peaked, 0.0) << v.name << ": bf16 arithmetic should differ from f32 somewhere";
  }
}

// Every case of awkward_shapes on every SIMD level (AMX: bf16 scores by tile multiplies where
// pages of 16 and widths 64 and 128, rope 16 and 64 allow; 90, page size 1 and RoPE on read fall
// back to the vector kernel), and every case of bf16_precision_shapes in bf16 precision on the
// best level with AVX-512 BF16 and on the scalar reference. One test per case, named by it:
// --gtest_filter='*avx512_T97_H6_G2_k90_v90_r0_bf16_page16_seed3_twostream' runs one alone.
struct KernelCase {
  Case c;
  bool one_stream = false;
  std::string level;  // avx2 | avx512 | amx | bf16 (the best level with AVX-512 BF16) | scalar

  std::string name() const {
    return level + "_" + c.name() + (one_stream ? "_onestream" : "_twostream");
  }
};

// gtest prints a failing case by its name, not its bytes
void PrintTo(const KernelCase& k, std::ostream* os) { *os << k.name(); }

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  for (const char* level : {"avx2", "avx512", "amx"}) {
    awkward_shapes([&](const Case& c, bool one_stream) {
      cases.push_back({c, one_stream, level});
    });
  }
  for (const char* level : {"bf16", "scalar"}) {
    bf16_precision_shapes([&](const Case& c, bool one_stream) {
      cases.push_back({c, one_stream, level});
    });
  }
  for (const char* level : {"avx2", "avx512", "amx", "scalar"}) {
    pair_order_shapes(AttnPrecision::kF32, [&](const Case& c, bool one_stream) {
      cases.push_back({c, one_stream, level});
    });
  }
  for (const char* level : {"bf16", "scalar"}) {
    pair_order_shapes(AttnPrecision::kBf16, [&](const Case& c, bool one_stream) {
      cases.push_back({c, one_stream, level});
    });
  }
  return cases;
}

class DecodeKernelCase : public testing::TestWithParam<KernelCase> {};

TEST_P(DecodeKernelCase, MatchesTheReference) {
  const KernelCase& k = GetParam();
  CpuIsa isa = CpuIsa::kScalar;
  if (k.level == "avx2") isa = CpuIsa::kAvx2;
  if (k.level == "avx512") isa = CpuIsa::kAvx512;
  if (k.level == "amx") isa = CpuIsa::kAmx;
  if (k.level == "bf16") {
    const FastDecoder best(1);
    if (!best.supports_bf16_precision()) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
    isa = best.isa();
  }
  if (!cpu_supports(isa)) GTEST_SKIP() << "this CPU (or kernel) cannot run " << k.level;
  check(k.c, k.one_stream, isa);
}

INSTANTIATE_TEST_SUITE_P(Decode, DecodeKernelCase, testing::ValuesIn(kernel_cases()),
                         [](const testing::TestParamInfo<KernelCase>& case_info) {
                           return case_info.param.name();
                         });

TEST(FastDecodeTest, Avx2RefusesBf16Precision) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C";
  Case c{.lengths = {40},
         .heads = 4,
         .groups = 2,
         .key_width = 64,
         .value_width = 64,
         .dtype = DType::kBf16};
  c.precision = AttnPrecision::kBf16;
  EXPECT_THROW(check(c, false, CpuIsa::kAvx2), std::invalid_argument);
}

TEST(FastDecodeTest, EnvironmentForcesTheScalarReference) {
  ::setenv("KVLAB_CPU_ISA", "scalar", 1);
  EXPECT_EQ(detect_cpu_isa(), CpuIsa::kScalar);
  ::setenv("KVLAB_CPU_ISA", "avx2", 1);  // caps the level: AVX2 even where AVX-512 exists
  EXPECT_EQ(detect_cpu_isa(), cpu_supports(CpuIsa::kAvx2) ? CpuIsa::kAvx2 : CpuIsa::kScalar);
  ::setenv("KVLAB_CPU_ISA", "avx-512", 1);  // a typo is an error, not the best level
  EXPECT_THROW(detect_cpu_isa(), std::invalid_argument);
  ::unsetenv("KVLAB_CPU_ISA");
  FastDecoder scalar(1, CpuIsa::kScalar);
  EXPECT_EQ(cpu_isa_name(scalar.isa()), "scalar");
}

// A level the machine cannot run is a clear error at construction, not SIGILL at the first step
// (here every level this CPU has constructs; elsewhere the others must throw).
TEST(FastDecodeTest, ConstructsExactlyTheLevelsThisMachineRuns) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    SCOPED_TRACE(std::string(cpu_isa_name(isa)));
    if (cpu_supports(isa)) {
      EXPECT_EQ(FastDecoder(1, isa).isa(), isa);
    } else {
      EXPECT_THROW(FastDecoder(1, isa), std::invalid_argument);
    }
  }
  EXPECT_TRUE(cpu_supports(detect_cpu_isa()));
}

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<int> hits(1000, 0);
  for (int round = 0; round < 5; ++round) {
    pool.parallel_for(1000, [&](int64_t i) { ++hits[static_cast<size_t>(i)]; });
  }
  for (int h : hits) EXPECT_EQ(h, 5);
  pool.parallel_for(0, [&](int64_t) { FAIL(); });
}

// Many small jobs back to back (the workers spinning between them), jobs after the workers
// went to sleep, and job sizes of 1 to 9 items: every item runs once, in its own job.
TEST(ThreadPoolTest, SmallJobsBackToBackAndAfterSleepRunEveryItemOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(9);
  std::vector<int> expected(9, 0);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 1 + job % 9;
    std::atomic<int> in_job{0};
    pool.parallel_for(n, [&](int64_t i) {
      hits[static_cast<size_t>(i)].fetch_add(1);
      in_job.fetch_add(1);
    });
    ASSERT_EQ(in_job.load(), n) << "job " << job;  // all done when parallel_for returns
    for (int64_t i = 0; i < n; ++i) ++expected[static_cast<size_t>(i)];
    if (job % 5000 == 4999) {  // idle well past the spin time: the workers sleep
      std::this_thread::sleep_for(std::chrono::microseconds(20 * ThreadPool::kSpinMicros));
    }
  }
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(hits[i].load(), expected[i]) << "item " << i;
}

// The products' rows of x prepared by their own tasks (RowsInTheJob): every row prepared once,
// and each task goes on only when all rows are ready, however the tasks and the rows fall on the
// threads (more tasks than threads, fewer, a pool of one; rows that take a while to prepare).
TEST(RowsInTheJobTest, EveryRowPreparedOnceAndAllReadyBeforeATaskGoesOn) {
  for (int threads : {1, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t rows : {0, 1, 2, 7, 16, 37, 128}) {
      for (int64_t tasks : {1, 2, 3, 9}) {
        SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(rows) + " rows, " +
                     std::to_string(tasks) + " tasks");
        RowsInTheJob job(rows, pool.size());
        std::vector<std::atomic<int>> prepared(static_cast<size_t>(rows));
        std::atomic<int64_t> early{0};
        pool.parallel_for(tasks, [&](int64_t) {
          job.ready([&](int64_t b) {
            if (b % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
            prepared[static_cast<size_t>(b)].fetch_add(1);
          });
          for (const std::atomic<int>& p : prepared) {
            if (p.load() != 1) early.fetch_add(1);
          }
        });
        EXPECT_EQ(early.load(), 0);
        for (const std::atomic<int>& p : prepared) EXPECT_EQ(p.load(), 1);
      }
    }
  }
}

}  // namespace
}  // namespace kvlab
