// prefill_attention (a prompt chunk's rows of one sequence, each cached row read once for all of
// them) against the scalar reference row by row, through FastDecoder::run on calls that mix runs
// with lone decode rows: every cache layout the families use (two- and one-stream, rope streams,
// RoPE on read with a norm, keys rebuilt per head, key pairs), every cache dtype with a SIMD
// kernel, odd widths, page sizes and stripe-crossing lengths.
#include "kernels/prefill_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/fast_decoder.h"
#include "kernels/kernel_test_cache.h"

namespace kvlab {
namespace {

struct PrefillCase {
  DType dtype = DType::kF32;
  bool one_stream = false;
  int64_t heads = 4, groups = 2, key_width = 64, value_width = 64, rope_width = 0;
  int64_t page = 16;
  bool rope_on_read = false, norm = false, rebuild = false;
  KeyOrder key_order = KeyOrder::kRows;
  AttnPrecision precision = AttnPrecision::kF32;
  // the call's rows: (sequence, tokens it sees); a sequence's length is its largest
  std::vector<std::pair<int32_t, int64_t>> rows;
  uint32_t seed = 1;
  bool nan_in_last_value = false;  // sequence 1's last value row holds a NaN

  std::string name() const {
    std::string out = std::string(dtype_name(dtype)) + (one_stream ? "_one" : "_two") + "_H" +
                      std::to_string(heads) + "_G" + std::to_string(groups) + "_k" +
                      std::to_string(key_width) + "_v" + std::to_string(value_width) + "_r" +
                      std::to_string(rope_width) + "_page" + std::to_string(page);
    if (rope_on_read) out += "_ropeonread";
    if (norm) out += "_norm";
    if (rebuild) out += "_rebuild";
    if (key_order != KeyOrder::kRows) out += "_pairs";
    out += std::string("_") + attn_precision_name(precision) + "_rows";
    for (auto [s, t] : rows) out += "_" + std::to_string(s) + ":" + std::to_string(t);
    return out.size() <= 160 ? out : out.substr(0, 120) + "…" + out.substr(out.size() - 30);
  }
};

// rows: a lone row of sequence 0, a run of sequence 1's tokens first..first+count-1 (one more
// each), a lone row of sequence 2, and a run over sequence 0's first tokens.
std::vector<std::pair<int32_t, int64_t>> mixed_rows(int64_t first, int64_t count) {
  std::vector<std::pair<int32_t, int64_t>> rows = {{0, 37}};
  for (int64_t i = 0; i < count; ++i) rows.push_back({1, first + i});
  rows.push_back({2, 5});
  for (int64_t i = 1; i <= 12; ++i) rows.push_back({0, i * 3});
  return rows;
}

// The page table of a call's rows (sequence, tokens it sees).
PageTable rows_table(const PagedKvCache& cache,
                     const std::vector<std::pair<int32_t, int64_t>>& rows) {
  std::vector<int32_t> seqs;
  std::vector<int64_t> tokens;
  for (auto [s, t] : rows) {
    seqs.push_back(s);
    tokens.push_back(t);
  }
  PageTable table;
  cache.page_table_into(seqs.data(), tokens.data(), static_cast<int64_t>(rows.size()), table);
  return table;
}

struct Outcome {
  std::vector<float> actual, expected_f32, expected;  // expected: at the case's precision
  std::vector<RowRun> runs;
  int64_t vw = 0;
  AttnPrecision lone_precision = AttnPrecision::kF32;  // what the lone rows compute in
  bool run_tiles =
      false;  // runs compute in bf16 products (AMX, AVX-512 BF16) where values are finite
};

Outcome run_case(const PrefillCase& c, CpuIsa isa) {
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  CacheLayout layout = kernel_test_layout(c.dtype, c.one_stream, c.groups, c.key_width,
                                          c.value_width, c.rope_width, c.rebuild);
  layout.key_order = c.key_order;
  std::vector<int64_t> lengths(3, 0);
  for (auto [s, t] : c.rows)
    lengths[static_cast<size_t>(s)] = std::max(lengths[static_cast<size_t>(s)], t);
  int64_t pages = 0;
  for (int64_t l : lengths) pages += (l + c.page - 1) / c.page;
  PagedKvCache cache(layout, 1, c.page, pages + 1, 3);
  for (int64_t len : lengths) {
    const int32_t seq = cache.add_sequence();
    cache.append(seq, len);
    for (int64_t pos = 0; pos < len; ++pos) {
      for (size_t s = 0; s < layout.streams.size(); ++s) {
        std::vector<float> row(static_cast<size_t>(layout.streams[s].width()));
        for (float& x : row) x = uniform(rng);
        const bool value_stream = layout.streams[s].role != StreamRole::kKey &&
                                  layout.streams[s].role != StreamRole::kRope;
        if (c.nan_in_last_value && seq == 1 && pos == len - 1 && value_stream) row[3] = NAN;
        cache.store_token(0, static_cast<int64_t>(s), seq, pos, row.data());
      }
    }
  }
  const int64_t n = static_cast<int64_t>(c.rows.size());
  const PageTable table = rows_table(cache, c.rows);
  Outcome o;
  o.vw = c.one_stream && !c.rebuild ? c.key_width : c.value_width;
  KernelTestQueries in(rng, n, c.heads, c.key_width, c.rope_width, o.vw, c.rebuild);
  DecodeParams p;
  p.q = in.q.data();
  p.q_rope = c.rope_width > 0 ? in.q_rope.data() : nullptr;
  point_at_pools(p, cache, c.one_stream, c.rope_width > 0);
  p.pages = table.view();
  p.n_seqs = n;
  p.n_heads = c.heads;
  p.n_groups = c.groups;
  p.key_width = c.key_width;
  p.value_width = o.vw;
  p.rope_width = c.rope_width;
  p.dtype = c.dtype;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.key_width + c.rope_width));
  p.rope_on_read = c.rope_on_read;
  p.norm_weight = c.norm ? in.norm.data() : nullptr;
  p.key_maps = c.rebuild ? in.key_maps.data() : nullptr;
  p.key_order = c.key_order;
  const size_t outputs = static_cast<size_t>(n * c.heads * o.vw);
  o.expected_f32.assign(outputs, -7.0f);
  o.expected.assign(outputs, -8.0f);
  o.actual.assign(outputs, -9.0f);
  p.out = o.expected_f32.data();
  decode_attention_reference(p);
  FastDecoder fast(2, isa);
  // bf16 arithmetic where this decoder has it (AVX-512 BF16), f32 elsewhere
  const bool bf16 = c.precision == AttnPrecision::kBf16;
  p.precision = bf16 && !fast.supports_bf16_precision() ? AttnPrecision::kF32 : c.precision;
  p.out = o.expected.data();
  decode_attention_reference(p);
  p.out = o.actual.data();
  fast.run(p);
  find_row_runs(p, kPrefillMinRows, o.runs);
  o.lone_precision = effective_precision(p);
  // bf16 products: AMX tiles, or AVX-512 BF16 for values up to 64 wide
  const bool bf16_products = isa == CpuIsa::kAmx || (isa == CpuIsa::kAvx512 && o.vw <= 64);
  o.run_tiles = bf16_products && cpu_has_avx512_bf16() && o.lone_precision == AttnPrecision::kBf16;
  return o;
}

void expect_matches(const PrefillCase& c, CpuIsa isa) {
  SCOPED_TRACE(c.name() + "_" + std::string(cpu_isa_name(isa)));
  const Outcome o = run_case(c, isa);
  ASSERT_FALSE(o.runs.empty()) << "the case has no run: it tests nothing of prefill_attention";
  const int64_t row_floats = c.heads * o.vw;
  std::vector<bool> in_run(c.rows.size(), false);
  for (const RowRun& run : o.runs) {
    for (int64_t b = run.first; b < run.first + run.count; ++b)
      in_run[static_cast<size_t>(b)] = true;
  }
  const double tight = c.dtype == DType::kF32 ? 1e-5 : 2e-5;
  std::vector<double> tile_rows;  // each tile-computed row's worst error
  for (size_t b = 0; b < c.rows.size(); ++b) {
    // a run's rows compute at f32 (bf16 in tiles), lone rows in the call's precision
    // (a run over the NaN value goes through the f32 path instead)
    const bool tiles = in_run[b] && o.run_tiles && !(c.nan_in_last_value && c.rows[b].first == 1);
    const std::vector<float>& expected = in_run[b] && !tiles ? o.expected_f32 : o.expected;
    double worst = 0;
    for (int64_t i = 0; i < row_floats; ++i) {
      const size_t at = b * static_cast<size_t>(row_floats) + static_cast<size_t>(i);
      ASSERT_EQ(std::isnan(o.actual[at]), std::isnan(expected[at]))
          << "row " << b << " element " << i << ": NaN where the reference has none, or none "
          << "where it has one";
      if (!std::isnan(expected[at])) {
        worst = std::max(worst, static_cast<double>(std::fabs(o.actual[at] - expected[at])));
      }
    }
    if (tiles) {
      tile_rows.push_back(worst);
      continue;
    }
    const bool exact = in_run[b] || o.lone_precision == AttnPrecision::kF32;
    EXPECT_LT(worst, exact ? tight : 4e-3) << "row " << b << (in_run[b] ? " (run)" : " (lone)");
  }
  if (!tile_rows.empty()) {
    // bf16 weights rounded relative to the running maximum of 32-token blocks where the reference
    // rounds them in 16-token blocks of 512-token items: each weight off by a bf16 step (2^-8 of
    // it) now and then, most rows within 2e-4 (measured: median 1.9e-4, worst 7.2e-4)
    std::sort(tile_rows.begin(), tile_rows.end());
    EXPECT_LT(tile_rows[tile_rows.size() / 2], 1e-3) << "median tile row";
    EXPECT_LT(tile_rows.back(), 4e-3) << "worst tile row";
  }
}

// The ISAs this machine runs SIMD kernels on (prefill_attention is not used on the scalar
// reference).
std::vector<CpuIsa> simd_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    if (cpu_supports(isa)) isas.push_back(isa);
  }
  return isas;
}

TEST(PrefillAttentionTest, FindsTheRunsOfOneSequence) {
  PrefillCase c;
  c.rows = mixed_rows(20, 30);
  Outcome o = run_case(c, CpuIsa::kScalar);
  ASSERT_EQ(o.runs.size(), 2u);
  EXPECT_EQ(o.runs[0].first, 1);  // sequence 1's rows: the lone row of sequence 0 before them
  EXPECT_EQ(o.runs[0].count, 30);
  EXPECT_EQ(o.runs[1].first, 32);  // sequence 0's rows after the lone row of sequence 2
  EXPECT_EQ(o.runs[1].count, 12);
  c.rows = mixed_rows(20, kPrefillMinRows - 1);  // too short: row by row
  o = run_case(c, CpuIsa::kScalar);
  ASSERT_EQ(o.runs.size(), 1u);
  EXPECT_EQ(o.runs[0].count, 12);
  c.rows.clear();  // one sequence's rows seeing fewer tokens each: no run
  for (int64_t t = 20; t > 0; --t) c.rows.push_back({1, t});
  EXPECT_TRUE(run_case(c, CpuIsa::kScalar).runs.empty());
}

TEST(PrefillAttentionTest, MatchesTheReferenceRowByRow) {
  std::vector<PrefillCase> cases;
  auto add = [&](PrefillCase c) {
    c.seed = static_cast<uint32_t>(cases.size() + 1);
    cases.push_back(c);
  };
  PrefillCase base;
  base.rows = mixed_rows(1, 150);  // a prompt's first 150 tokens
  add(base);
  PrefillCase c = base;
  c.rows = mixed_rows(500, 40);  // rows whose tokens cross the first stripe's end
  add(c);
  for (DType dtype : {DType::kBf16, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    c = base;
    c.dtype = dtype;
    c.precision = dtype == DType::kBf16 ? AttnPrecision::kBf16 : AttnPrecision::kInt8;
    add(c);
  }
  c = base;  // bf16 keys by element pairs
  c.dtype = DType::kBf16;
  c.key_order = KeyOrder::kTokenPairs;
  add(c);
  c.precision = AttnPrecision::kBf16;
  add(c);
  c = base;  // bf16 in tiles across a stripe's end
  c.dtype = DType::kBf16;
  c.precision = AttnPrecision::kBf16;
  c.rows = mixed_rows(500, 40);
  add(c);
  c = base;  // odd shapes: a partial group tile, widths off every vector, pages of 7
  c.heads = 6;
  c.groups = 3;
  c.key_width = 90;
  c.value_width = 70;
  c.page = 7;
  c.rows = mixed_rows(3, 37);
  add(c);
  c.dtype = DType::kBf16;  // the same in tiles: both widths padded
  c.precision = AttnPrecision::kBf16;
  add(c);
  c = base;  // mla / gva: one stream of latents, a shared rope stream (bf16 under q8_0)
  c.one_stream = true;
  c.heads = 8;
  c.groups = 1;
  c.rope_width = 16;
  add(c);
  c.dtype = DType::kBf16;  // the rope slice beside the latent in the tiles' depth
  c.precision = AttnPrecision::kBf16;
  add(c);
  c.dtype = DType::kQ8_0;
  c.precision = AttnPrecision::kInt8;
  add(c);
  c = base;  // K=V + RoPE: keys normalised and rotated on read
  c.one_stream = true;
  c.rope_on_read = true;
  c.norm = true;
  c.dtype = DType::kBf16;
  add(c);
  c.precision = AttnPrecision::kBf16;
  add(c);
  c = base;  // gva dr=0: each head's key rebuilt from the value row
  c.one_stream = true;
  c.rope_on_read = true;
  c.rebuild = true;
  c.heads = 6;
  c.key_width = 32;
  c.value_width = 48;
  add(c);
  c = base;  // one head
  c.heads = 1;
  c.groups = 1;
  c.rows = mixed_rows(1, 9);  // the shortest run
  add(c);
  for (CpuIsa isa : simd_isas()) {
    for (const PrefillCase& k : cases) expect_matches(k, isa);
  }
}

TEST(PrefillAttentionTest, ARowIsNotReachedByTokensItDoesNotSee) {
  PrefillCase c;
  c.rows = mixed_rows(40, 24);  // sequence 1: 63 tokens, the last one's value row holding a NaN
  c.nan_in_last_value = true;
  for (CpuIsa isa : simd_isas()) expect_matches(c, isa);
  c.dtype = DType::kBf16;  // where the run would go through tiles, it goes through f32 instead
  c.precision = AttnPrecision::kBf16;
  for (CpuIsa isa : simd_isas()) expect_matches(c, isa);
}

TEST(PrefillAttentionTest, RefusesRowsThatAreNotARun) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "the run is computed by the AVX2 path";
  PrefillCase c;
  c.rows = mixed_rows(20, 30);
  // rows 0..9 mix sequences 0 and 1: not a run
  std::vector<float> q(static_cast<size_t>(c.rows.size() * 4 * 64), 0.5f);
  const CacheLayout layout = kernel_test_layout(DType::kF32, false, 2, 64, 64, 0);
  PagedKvCache cache(layout, 1, 16, 16, 3);
  for (int64_t len : {37, 49, 5}) cache.append(cache.add_sequence(), len);
  const PageTable table = rows_table(cache, c.rows);
  std::vector<float> out(q.size());
  DecodeParams p;
  p.q = q.data();
  p.out = out.data();
  point_at_pools(p, cache, false, false);
  p.pages = table.view();
  p.n_seqs = static_cast<int64_t>(c.rows.size());
  p.n_heads = 4;
  p.n_groups = 2;
  p.key_width = p.value_width = 64;
  ThreadPool pool(1);
  PrefillWorkspace work;
  try {
    prefill_attention(p, RowRun{0, 10}, pool, work, nullptr, PrefillPath::kAvx2);
    FAIL() << "rows of two sequences taken as a run";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 does not continue row 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(prefill_attention(p, RowRun{40, 10}, pool, work, nullptr, PrefillPath::kAvx2),
               std::invalid_argument);
  EXPECT_NO_THROW(prefill_attention(p, RowRun{1, 30}, pool, work, nullptr, PrefillPath::kAvx2));
}

}  // namespace
}  // namespace kvlab
