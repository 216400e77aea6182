#include "experiments/step_ceilings.h"

#include <cstdint>
#include <optional>

#include "kernels/compute_peak.h"
#include "kernels/fast_decoder.h"
#include "kernels/gemm.h"
#include "kernels/memory_bandwidth.h"
#include "kernels/thread_pool.h"
#include "report/statistics.h"

namespace kvlab {

StepCeilings measure_step_ceilings(int threads) {
  StepCeilings c;
  c.gb_per_s = measure_read_bandwidth(int64_t{1} << 30, threads, 5).median();
  ThreadPool pool(threads);
  // the loops of the ISA the decoder runs: under KVLAB_CPU_ISA=avx2 on an AVX-512 CPU, AVX2's
  const bool cap_avx2 = detect_cpu_isa() == CpuIsa::kAvx2;
  const auto peak_of = [&](MacKind kind) {
    const std::optional<ComputePeak> peak = measure_compute_peak(kind, pool, 3, cap_avx2);
    return peak.has_value() ? peak->median() : 0.0;
  };
  c.f32_gmacs = peak_of(MacKind::kF32);
  c.bf16_gmacs = bf16_gemm_native() ? peak_of(MacKind::kBf16) : 0.0;
  c.int8_block_gmacs = quant_tile_min_rows(DType::kQ8_0) > 0 ? peak_of(MacKind::kInt8Blocks) : 0.0;
  c.bf16_loaded_gmacs = peak_of(MacKind::kBf16Loaded);
  // vpdpbusd where the decoder runs the VNNI kernel, else AVX2's vpmaddubsw (the AVX2 kernel)
  c.int8_gmacs = peak_of(MacKind::kInt8);
  return c;
}

std::optional<MacKind> StepCeilings::product_kind(DType weight_dtype, int64_t batch) const {
  if (weight_dtype == DType::kBf16) {
    const int64_t rows = bf16_product_min_rows();
    if (rows > 0 && batch >= rows && bf16_gmacs > 0) return MacKind::kBf16;
  }
  if (takes_quant_panels(weight_dtype)) {
    const int64_t expand_rows = quant_expand_min_rows(weight_dtype);
    if (expand_rows > 0 && batch >= expand_rows) {
      // bf16 tiles; without a measured bf16 peak none rather than the peak of another product
      return bf16_gmacs > 0 ? std::optional<MacKind>(MacKind::kBf16) : std::nullopt;
    }
    const int64_t rows = quant_tile_min_rows(weight_dtype);
    if (rows > 0 && batch >= rows) return MacKind::kInt8Blocks;
    // panels run the VNNI kernel, or the AVX2 one (int8_gmacs is the peak of the decoder's ISA);
    // rows, on the scalar reference, have no peak
    if (fastest_weight_order(weight_dtype) != WeightOrder::kRows) return MacKind::kInt8;
    return std::nullopt;
  }
  if (is_element_dtype(weight_dtype)) return MacKind::kF32;
  return std::nullopt;
}

double StepCeilings::product_gmacs(DType weight_dtype, int64_t batch) const {
  const std::optional<MacKind> kind = product_kind(weight_dtype, batch);
  if (!kind.has_value()) return 0.0;
  switch (*kind) {
    case MacKind::kF32:
      return f32_gmacs;
    case MacKind::kBf16:
      return bf16_gmacs;
    case MacKind::kInt8:
      return int8_gmacs;
    case MacKind::kInt8Blocks:
      return int8_block_gmacs;
    case MacKind::kBf16Loaded:
      return bf16_loaded_gmacs;
  }
  return 0.0;
}

CeilingSampler::CeilingSampler(int threads)
    : pool_(threads), probe_(int64_t{1} << 30), cap_avx2_(detect_cpu_isa() == CpuIsa::kAvx2) {}

void CeilingSampler::sample(std::optional<MacKind> kind, CeilingSamples& row) {
  row.gb_per_s_samples.push_back(probe_.read_gb_per_s(pool_));
  if (!kind.has_value()) return;
  const std::optional<ComputePeak> peak = measure_compute_peak(*kind, pool_, 1, cap_avx2_);
  if (peak.has_value()) row.gmacs_samples.push_back(peak->median());
}

double CeilingSamples::gb_per_s() const {
  return gb_per_s_samples.empty() ? 0.0 : median_of(gb_per_s_samples);
}
double CeilingSamples::gmacs() const {
  return gmacs_samples.empty() ? 0.0 : median_of(gmacs_samples);
}

}  // namespace kvlab
