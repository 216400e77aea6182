// StepCeilings::product_gmacs, the compute side of bench generate's and the serve suite's
// rooflines, against what the decoder runs: for every weight dtype and batch, the peak of the
// products FastDecoder::run picks for weights stored as this CPU's decoder stores them.
#include "experiments/step_ceilings.h"

#include <gtest/gtest.h>

#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

TEST(StepCeilingsTest, ProductPeakIsThePeakOfTheKernelTheDecoderRuns) {
  StepCeilings c;
  c.f32_gmacs = 1;  // distinct values: which peak came back is which kernel was assumed
  c.bf16_gmacs = 2;
  c.int8_block_gmacs = 3;
  c.int8_gmacs = 4;
  const FastDecoder decoder(1, detect_cpu_isa());
  for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t batch = 1; batch <= 130; ++batch) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " batch " + std::to_string(batch));
      MatVecParams p;
      p.n = batch;
      p.in = 64;
      p.out = 16;
      p.weight_dtype = dtype;
      p.weight_order = fastest_weight_order(dtype, decoder.isa());
      double expected = c.f32_gmacs;
      if (decoder.matvec_runs_bf16_products(p) || decoder.matvec_expands_quant_panels(p)) {
        expected = c.bf16_gmacs;
      } else if (takes_quant_panels(dtype)) {
        const int64_t tile_rows = quant_tile_min_rows(dtype, decoder.isa());
        // below the tiles, weights stored in panels run the VNNI or the AVX2 kernel; rows
        // (the scalar reference) have no peak
        const double vnni = p.weight_order != WeightOrder::kRows ? c.int8_gmacs : 0.0;
        expected = tile_rows > 0 && batch >= tile_rows ? c.int8_block_gmacs : vnni;
      }
      EXPECT_EQ(c.product_gmacs(dtype, batch), expected);
    }
  }
  // without a measured bf16 peak, expanded rows have no compute roofline rather than the peak of
  // a product they do not run
  StepCeilings no_bf16 = c;
  no_bf16.bf16_gmacs = 0;
  const int64_t expand_rows = quant_expand_min_rows(DType::kQ8_0, decoder.isa());
  if (expand_rows > 0) {
    EXPECT_EQ(no_bf16.product_gmacs(DType::kQ8_0, expand_rows), 0.0);
  }
}

// A row's ceilings are the medians of its own samples (bench generate's rows, the serve suite's
// variants), 0 where it has none (a kind without a loop on this CPU).
TEST(StepCeilingsTest, RowCeilingsAreTheMediansOfTheirSamples) {
  CeilingSamples row;
  EXPECT_EQ(row.gb_per_s(), 0.0);
  EXPECT_EQ(row.gmacs(), 0.0);
  row.gb_per_s_samples = {61.0, 28.0, 73.0};
  row.gmacs_samples = {838.0, 535.0, 801.0, 790.0, 612.0};
  EXPECT_EQ(row.gb_per_s(), 61.0);
  EXPECT_EQ(row.gmacs(), 790.0);
  row.gmacs_samples.clear();  // bandwidth sampled, no peak
  EXPECT_EQ(row.gmacs(), 0.0);
  EXPECT_EQ(row.gb_per_s(), 61.0);
}

}  // namespace
}  // namespace kvlab
