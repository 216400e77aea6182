#pragma once

namespace kvlab {

// What a step's time is measured against (`bench generate`'s and the serve suite's rooflines):
// the read bandwidth (bench memory's probe over 1 GiB, median of 5) and the multiply-add peaks
// (bench compute's, median of 3) of f32 FMAs and — where the CPU has bf16 products, which the
// bf16 weights run bf16 products from bf16_product_min_rows() sequences — of bf16 (else 0).
struct StepCeilings {
  double gb_per_s = 0;
  double f32_gmacs = 0;
  double bf16_gmacs = 0;
};

// Takes seconds: call it once a run, after the run's inputs are known to fit.
StepCeilings measure_step_ceilings(int threads);

}  // namespace kvlab
