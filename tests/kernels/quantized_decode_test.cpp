// Decode attention over q8_0, q4_0 and fp8 caches: the definition is "dequantize each cached row,
// then attend in f32", so a quantized cache must give exactly what an f32 cache holding the
// dequantized rows gives — on every kernel shape (two-stream, one-stream with a bf16 rope
// stream, RoPE and norm on read, rebuilt keys), with ragged lengths, small pages and widths that
// end mid-block. FastDecoder (every ISA this CPU runs) is held to the same answer, and with
// AttnPrecision::kInt8 (integer dot products against the query rounded to q8_0) to the
// reference's int8 roundings. One test per case and ISA, named by them:
// --gtest_filter='*onestream_rope16_q4_0_page3_seed108_avx2' runs one alone.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

struct Shape {
  const char* name;
  bool one_stream = false;
  int64_t heads = 6, groups = 2, key_width = 90, value_width = 90, rope_width = 0;
  bool rope_on_read = false, norm = false, rebuild = false;
};

const Shape kShapes[] = {
    {"twostream_w90", false, 6, 2, 90, 90},
    {"twostream_w32_mqa", false, 4, 1, 32, 32},
    // keys of two quads (the AVX-512 kernel reads four blocks at a time), five heads a group
    {"twostream_k160_v72", false, 10, 2, 160, 72},
    {"onestream_w200_rope8", true, 5, 1, 200, 200, 8},
    {"onestream_rope16", true, 8, 2, 64, 64, 16},
    {"onestream_ropeonread_norm", true, 4, 4, 48, 48, 0, true, true},
    {"rebuilt_keys", true, 4, 2, 24, 40, 0, true, false, true},
};

// Fills a `dtype` cache and an f32 twin with its rows dequantized; the reference over both, and
// FastDecoder over the quantized one, must agree.
// half_grid: every query block's largest value is 127/16, so its q8_0 scale is 1/16 exactly, and
// the others sit on halves of that step — where rounding half away from zero (ggml's rule, the
// reference's) and to even part: a kernel that rounds its queries otherwise moves its scores.
void check(const Shape& s, DType dtype, int64_t page, uint32_t seed, bool half_grid, CpuIsa isa) {
  SCOPED_TRACE(std::string(s.name) + " " + std::string(dtype_name(dtype)) + " page " +
               std::to_string(page));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<int64_t> lengths = {37, 1, 1100};  // 1100: three work items
  CacheLayout quantized;
  quantized.dtype = dtype;
  const int64_t content_width = s.rebuild ? s.value_width : s.key_width;
  quantized.streams.push_back(
      {s.one_stream ? StreamRole::kContent : StreamRole::kKey, s.groups, content_width});
  if (!s.one_stream) quantized.streams.push_back({StreamRole::kValue, s.groups, s.value_width});
  if (s.rope_width > 0) {
    quantized.streams.push_back({StreamRole::kRope, 1, s.rope_width});
    quantized.rope_dtype = DType::kBf16;  // as AttentionSpec lays it out
  }
  CacheLayout plain = quantized;
  plain.dtype = DType::kF32;
  plain.rope_dtype.reset();
  int64_t pages = 0;
  for (int64_t l : lengths) pages += (l + page - 1) / page;
  const int64_t n = static_cast<int64_t>(lengths.size());
  PagedKvCache qcache(quantized, 1, page, pages, n), fcache(plain, 1, page, pages, n);
  std::vector<int32_t> seqs;
  for (int64_t len : lengths) {
    const int32_t seq = qcache.add_sequence();
    ASSERT_EQ(fcache.add_sequence(), seq);
    qcache.append(seq, len);
    fcache.append(seq, len);
    seqs.push_back(seq);
    for (int64_t pos = 0; pos < len; ++pos) {
      for (size_t k = 0; k < quantized.streams.size(); ++k) {
        const CacheStream& st = quantized.streams[k];
        std::vector<float> row(static_cast<size_t>(st.width()));
        for (size_t i = 0; i < row.size(); ++i) row[i] = normal(rng) * (i % 11 == 0 ? 6.0f : 1.0f);
        qcache.store_token(0, static_cast<int64_t>(k), seq, pos, row.data());
        std::vector<float> back(row.size());
        qcache.load_token(0, static_cast<int64_t>(k), seq, pos, back.data());
        fcache.store_token(0, static_cast<int64_t>(k), seq, pos, back.data());
      }
    }
  }
  std::vector<float> q(static_cast<size_t>(n * s.heads * s.key_width));
  std::vector<float> qr(static_cast<size_t>(n * s.heads * s.rope_width));
  std::vector<float> norm(static_cast<size_t>(s.key_width));
  std::vector<float> maps(
      static_cast<size_t>(s.rebuild ? s.heads * s.value_width * s.key_width : 0));
  for (float& x : q) x = normal(rng);
  if (half_grid) {
    std::uniform_int_distribution<int> step(-126, 125);
    for (size_t i = 0; i < q.size(); ++i) {
      const bool first = (i % static_cast<size_t>(s.key_width)) % 32 == 0;
      q[i] = first ? 127.0f / 16 : (static_cast<float>(step(rng)) + 0.5f) / 16;
    }
  }
  for (float& x : qr) x = normal(rng);
  for (float& x : norm) x = 1.0f + 0.3f * normal(rng);
  for (float& x : maps) x = normal(rng) / std::sqrt(static_cast<float>(s.value_width));
  const PageTable table = qcache.page_table(seqs);
  DecodeParams p;
  p.q = q.data();
  p.q_rope = s.rope_width > 0 ? qr.data() : nullptr;
  p.pages = table.view();
  p.n_seqs = n;
  p.n_heads = s.heads;
  p.n_groups = s.groups;
  p.key_width = s.key_width;
  p.value_width = s.value_width;
  p.rope_width = s.rope_width;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.key_width + s.rope_width));
  p.rope_on_read = s.rope_on_read;
  p.norm_weight = s.norm ? norm.data() : nullptr;
  p.key_maps = s.rebuild ? maps.data() : nullptr;
  auto run = [&](const PagedKvCache& cache, DType pool_dtype, std::optional<DType> rope_dtype,
                 auto&& kernel) {
    DecodeParams r = p;
    r.dtype = pool_dtype;
    r.rope_dtype = rope_dtype;
    r.key_pool = cache.pool(0, 0);
    r.value_pool = s.one_stream ? cache.pool(0, 0) : cache.pool(0, 1);
    r.rope_pool = s.rope_width > 0 ? cache.pool(0, s.one_stream ? 1 : 2) : nullptr;
    std::vector<float> out(static_cast<size_t>(n * s.heads * s.value_width), -5.0f);
    r.out = out.data();
    kernel(r);
    return out;
  };
  const std::optional<DType> rope_dtype =
      s.rope_width > 0 ? std::optional<DType>(DType::kBf16) : std::nullopt;
  const std::vector<float> expected =
      run(fcache, DType::kF32, std::nullopt,
          [](const DecodeParams& r) { decode_attention_reference(r); });
  const std::vector<float> actual =
      run(qcache, dtype, rope_dtype, [](const DecodeParams& r) { decode_attention_reference(r); });
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(actual[i])) << i;
    ASSERT_NEAR(actual[i], expected[i], 1e-6) << "element " << i;
  }
  // int8 arithmetic (q8_0/q4_0 keys that are cached rows): the reference applies the query's
  // q8_0 rounding; every ISA's kernel equals it to f32 accumulation, and it differs from f32
  const bool int8 = dtype != DType::kFp8 && !s.rope_on_read;
  p.precision = int8 ? AttnPrecision::kInt8 : AttnPrecision::kF32;
  const std::vector<float> expected_int8 =
      run(qcache, dtype, rope_dtype, [](const DecodeParams& r) { decode_attention_reference(r); });
  if (int8) {
    double moved = 0, largest = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      moved = std::max(moved, static_cast<double>(std::fabs(expected_int8[i] - expected[i])));
      largest = std::max(largest, static_cast<double>(std::fabs(expected[i])));
    }
    EXPECT_GT(moved, 1e-5) << "the query's rounding changes the result";
    EXPECT_LT(moved, 0.1 * largest) << "but not by much";
  }
  FastDecoder decoder(2, isa);
  const std::vector<float> fast =
      run(qcache, dtype, rope_dtype, [&](const DecodeParams& r) { decoder.run(r); });
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_FALSE(std::isnan(fast[i])) << cpu_isa_name(isa) << " element " << i;
    ASSERT_NEAR(fast[i], expected_int8[i], int8 ? 2e-4 : 1e-5)
        << cpu_isa_name(isa) << " element " << i;
  }
  // steady state: the workspace reused gives the same answer
  EXPECT_EQ(run(qcache, dtype, rope_dtype, [&](const DecodeParams& r) { decoder.run(r); }), fast);
}

struct QuantizedCase {
  const Shape* shape = nullptr;
  DType dtype = DType::kQ8_0;
  int64_t page = 16;
  uint32_t seed = 0;
  bool half_grid = false;
  CpuIsa isa = CpuIsa::kScalar;

  std::string name() const {
    return std::string(shape->name) + "_" + std::string(dtype_name(dtype)) + "_page" +
           std::to_string(page) + (half_grid ? "_halfgrid" : "") + "_seed" + std::to_string(seed) +
           "_" + std::string(cpu_isa_name(isa));
  }
};

// gtest prints a failing case by its name, not its bytes
void PrintTo(const QuantizedCase& c, std::ostream* os) { *os << c.name(); }

// Every shape × q8_0, q4_0, fp8 × pages of 3 and 16 tokens; then the query-rounding cases
// (half_grid) of q8_0 on the shapes whose kernels round the query (rotated and rebuilt keys run
// the reference); each on the scalar, AVX2 and AVX-512 levels.
std::vector<QuantizedCase> quantized_cases() {
  std::vector<QuantizedCase> cases;
  const CpuIsa isas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512};
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kFp8}) {
      for (int64_t page : {3, 16}) {
        ++seed;
        for (CpuIsa isa : isas) {
          cases.push_back({.shape = &s, .dtype = dtype, .page = page, .seed = seed, .isa = isa});
        }
      }
    }
  }
  seed = 300;
  for (const Shape& s : kShapes) {
    if (s.rope_on_read) continue;
    ++seed;
    for (CpuIsa isa : isas) {
      cases.push_back({.shape = &s,
                       .dtype = DType::kQ8_0,
                       .page = 16,
                       .seed = seed,
                       .half_grid = true,
                       .isa = isa});
    }
  }
  return cases;
}

class QuantizedDecodeCase : public testing::TestWithParam<QuantizedCase> {};

TEST_P(QuantizedDecodeCase, EqualsAttentionOverTheDequantizedRows) {
  const QuantizedCase& c = GetParam();
  if (!cpu_supports(c.isa)) GTEST_SKIP() << "this CPU cannot run " << cpu_isa_name(c.isa);
  check(*c.shape, c.dtype, c.page, c.seed, c.half_grid, c.isa);
}

INSTANTIATE_TEST_SUITE_P(Quantized, QuantizedDecodeCase, testing::ValuesIn(quantized_cases()),
                         [](const testing::TestParamInfo<QuantizedCase>& case_info) {
                           return case_info.param.name();
                         });

TEST(QuantizedDecodeTest, RefusesARopePoolOfAnotherDtypeUnderAnElementCache) {
  // f32/bf16/f16 kernels read the rope pool in the cache's dtype: a different one is refused
  std::vector<float> q(4), out(4);
  const int32_t indptr[] = {0, 0}, last[] = {0};
  DecodeParams p;
  p.q = q.data();
  p.q_rope = q.data();
  p.out = out.data();
  std::vector<std::byte> pool(64);
  p.key_pool = p.value_pool = p.rope_pool = pool.data();
  p.pages = {indptr, indptr, last, 16};
  p.n_seqs = 1;
  p.n_heads = p.n_groups = 1;
  p.key_width = p.value_width = 2;
  p.rope_width = 2;
  p.dtype = DType::kBf16;
  p.rope_dtype = DType::kF32;
  EXPECT_THROW(decode_attention_reference(p), std::invalid_argument);
  p.dtype = DType::kQ8_0;
  EXPECT_NO_THROW(decode_attention_reference(p));
}

}  // namespace
}  // namespace kvlab
