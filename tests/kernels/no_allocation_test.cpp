// Steady-state decode allocates nothing: appending a token, writing its rows, refreshing the
// page table and running the decode kernel, step after step, with every heap allocation of
// the process counted (tests/alloc_counter.cpp).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "alloc_counter.h"
#include "cache/decode_params.h"
#include "cache/paged_cache.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "spec/test_shapes.h"

namespace kvlab {
namespace {

// The fast path only: the scalar reference is the plain twin tests compare against and is
// free to allocate.
TEST(NoAllocationTest, DecodeStepsAllocateNothingOnceWarm) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2 kernel on this CPU";
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(std::string(cpu_isa_name(isa)));
    const AttentionSpec spec =
        AttentionSpec::parse("gqa:2", testing::rope_decoder(8, 64), DType::kBf16);
    const CacheLayout layout = spec.cache_layout();  // k and v, 2 groups × 64
    PagedKvCache cache(layout, /*n_layers=*/1, /*page_size=*/16, /*max_pages=*/64, /*max_seqs=*/2);
    const std::vector<int32_t> seqs = {cache.add_sequence(), cache.add_sequence()};
    std::vector<float> row(128, 0.25f);
    auto append_token = [&](int32_t seq) {
      const int64_t pos = cache.append(seq, 1);
      for (int64_t s = 0; s < 2; ++s) cache.store_token(0, s, seq, pos, row.data());
    };
    for (int i = 0; i < 300; ++i) append_token(seqs[0]);
    for (int i = 0; i < 77; ++i) append_token(seqs[1]);
    std::vector<float> q(2 * 8 * 64, 0.1f), out(2 * 8 * 64);
    PageTable table;
    table.indptr.reserve(3);
    table.last_page_len.reserve(2);
    table.page_ids.reserve(64);  // the runtime sizes its table for the cache's pages
    FastDecoder decoder(2, isa);
    auto step = [&] {
      for (int32_t seq : seqs) append_token(seq);
      cache.page_table_into(seqs, table);
      DecodeParams p = decode_params_for(spec, cache, 0, table);
      p.q = q.data();
      p.out = out.data();
      decoder.run(p);
    };
    step();  // warm-up: the workspace grows to this batch
    step();
    testing::start_counting_allocations();
    for (int i = 0; i < 40; ++i) step();  // crosses page boundaries for both sequences
    EXPECT_EQ(testing::stop_counting_allocations(), 0);
    EXPECT_EQ(cache.length(seqs[0]), 342);
  }
}

// The dense layers' kernels too, for every weight dtype: the q8_0 rows of x live in the
// decoder's scratch, grown by the first call.
TEST(NoAllocationTest, DenseLayersAllocateNothingOnceWarm) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2 kernel on this CPU";
  const int64_t in = 96, out = 40, n = 3;
  std::vector<float> w(static_cast<size_t>(in * out), 0.5f), x(static_cast<size_t>(n * in), 1.0f);
  std::vector<float> y(static_cast<size_t>(n * out));
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_supports(isa)) continue;
    FastDecoder decoder(2, isa);
    for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " " + std::string(dtype_name(dtype)));
      std::vector<std::byte> rows(static_cast<size_t>(out * row_bytes(dtype, in)));
      store_rows(w.data(), out, in, dtype, rows.data());
      MatVecParams p{rows.data(), nullptr, x.data(), y.data(), n, in, out, 0, 0, dtype};
      decoder.run(p);  // warm-up: the scratch grows to this batch
      testing::start_counting_allocations();
      for (int i = 0; i < 20; ++i) decoder.run(p);
      EXPECT_EQ(testing::stop_counting_allocations(), 0);
      // and f32, f16 (and on AVX2 bf16) in the panels this decoder stores them in
      if (!takes_float_panels(dtype) && !(dtype == DType::kBf16 && isa == CpuIsa::kAvx2)) continue;
      if (fastest_weight_order(dtype, isa) != WeightOrder::kPanels) continue;
      std::vector<std::byte> panels(static_cast<size_t>(panel_bytes(dtype, out, in)));
      pack_panels(dtype, rows.data(), out, in, panels.data());
      p.weight = panels.data();
      p.weight_order = WeightOrder::kPanels;
      for (int64_t rows_of_x : {int64_t{1}, n}) {
        p.n = rows_of_x;
        decoder.run(p);
        testing::start_counting_allocations();
        for (int i = 0; i < 20; ++i) decoder.run(p);
        EXPECT_EQ(testing::stop_counting_allocations(), 0) << "panels, " << rows_of_x << " rows";
        EXPECT_EQ(y[static_cast<size_t>(rows_of_x * out - 1)], 48.0f);  // 96 × 0.5
      }
    }
  }
}

// bf16 weights in panels (where the decoder stores them so): x kept in f32 (one row), rounded to
// bf16 by the calling thread, and rounded on the pool (from 32,768 elements).
TEST(NoAllocationTest, Bf16PanelsAllocateNothingOnceWarm) {
  if (fastest_weight_order(DType::kBf16) != WeightOrder::kPanels) {
    GTEST_SKIP() << "bf16 weights are not stored in panels on this CPU";
  }
  const int64_t in = 1000, out = 40;
  std::vector<uint16_t> w(static_cast<size_t>(in * out), 0x3F00);  // 0.5
  std::vector<std::byte> panels(static_cast<size_t>(bf16_panel_bytes(out, in)));
  pack_bf16_panels(w.data(), out, in, panels.data());
  FastDecoder decoder(2, detect_cpu_isa());
  for (int64_t n : {1, 3, 16, 40}) {
    SCOPED_TRACE(std::to_string(n) + " rows of x");
    std::vector<float> x(static_cast<size_t>(n * in), 1.0f), y(static_cast<size_t>(n * out));
    MatVecParams p{panels.data(), nullptr, x.data(), y.data(), n, in, out, 0, 0, DType::kBf16};
    p.weight_order = WeightOrder::kPanels;
    decoder.run(p);  // warm-up: the scratch grows to this batch
    testing::start_counting_allocations();
    for (int i = 0; i < 20; ++i) decoder.run(p);
    EXPECT_EQ(testing::stop_counting_allocations(), 0);
    EXPECT_EQ(y[static_cast<size_t>(n * out - 1)], 500.0f);
  }
}

}  // namespace
}  // namespace kvlab
