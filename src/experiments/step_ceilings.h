#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/compute_peak.h"
#include "kernels/memory_bandwidth.h"
#include "kernels/thread_pool.h"
#include "spec/dtype.h"

namespace kvlab {

// What a step's time is measured against (`bench generate`'s and the serve suite's rooflines):
// the read bandwidth (bench memory's probe over 1 GiB, median of 5) and the multiply-add peaks
// (bench compute's, median of 3) of f32 FMAs; where the CPU has bf16 products, which the bf16
// weights run from bf16_product_min_rows() sequences, of bf16 (else 0); where q8_0 and q4_0 weights
// run AMX's int8 tiles, from quant_tile_min_rows() sequences, of those at one block a multiply
// (else 0); from quant_expand_min_rows() sequences they run bf16 tiles (expanded), at bf16's; below
// those (and at every batch on an AVX-512 VNNI CPU without AMX) they run the VNNI kernels, at the
// int8 dot products' peak (vpdpbusd, where the decoder runs AVX-512 and the CPU has VNNI); without
// VNNI the AVX2 kernel, at AVX2's int8 peak (vpmaddubsw with int16 sums, q4_0's inner loop; q8_0's
// takes twice its multiplies a product).
struct StepCeilings {
  double gb_per_s = 0;
  double f32_gmacs = 0;
  double bf16_gmacs = 0;
  double int8_block_gmacs = 0;
  double int8_gmacs = 0;
  // Where the decoder runs AMX: bf16 tiles whose operands are loaded from L1 every round (bench
  // compute's "bf16 tiles loaded"): stated beside the roofline, not part of it (else 0).
  double bf16_loaded_gmacs = 0;
  // The multiply-adds a step over `batch` sequences multiplies `weight_dtype` weights with: bf16
  // or int8 blocks where those products run (and their peak was measured), int8 dot products
  // where block weights run the VNNI or the AVX2 panel kernel, f32 for the other float dtypes;
  // nullopt (no compute roofline) for block weights in rows (the scalar reference).
  std::optional<MacKind> product_kind(DType weight_dtype, int64_t batch) const;
  // The measured peak of product_kind (0 where nullopt).
  double product_gmacs(DType weight_dtype, int64_t batch) const;
};

// Takes seconds: call it once a run, after the run's inputs are known to fit.
StepCeilings measure_step_ceilings(int threads);

// One row's samples of its ceilings (CeilingSampler::sample adds to them), and their medians
// (0 where there are none).
struct CeilingSamples {
  std::vector<double> gb_per_s_samples, gmacs_samples;
  double gb_per_s() const;
  double gmacs() const;
};

// A row's own ceilings, sampled beside its runs. On a shared VM the bandwidth and the peaks move
// between minutes, and rows held to ceilings measured once before them all read 41–89% of their
// roofline in one run and 95–161% in the next (docs/kernels/dense-decode.md). A sample is one read
// of a 1 GiB buffer (bench memory's probe, on a pool of its own; it also evicts the last-level
// cache) and, given a kind, one round of bench compute's loop of the decoder's ISA; a row's
// ceilings are the medians of its samples.
class CeilingSampler {
 public:
  explicit CeilingSampler(int threads);
  // One sample into `row`: the bandwidth, and the peak of `kind` where given (and this CPU has
  // its loop).
  void sample(std::optional<MacKind> kind, CeilingSamples& row);

 private:
  ThreadPool pool_;
  BandwidthProbe probe_;
  bool cap_avx2_;
};

}  // namespace kvlab
