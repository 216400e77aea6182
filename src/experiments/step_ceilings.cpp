#include "experiments/step_ceilings.h"

#include <cstdint>
#include <optional>

#include "kernels/compute_peak.h"
#include "kernels/gemm.h"
#include "kernels/memory_bandwidth.h"
#include "kernels/thread_pool.h"

namespace kvlab {

StepCeilings measure_step_ceilings(int threads) {
  StepCeilings c;
  c.gb_per_s = measure_read_bandwidth(int64_t{1} << 30, threads, 5).median();
  ThreadPool pool(threads);
  const auto peak_of = [&](MacKind kind) {
    const std::optional<ComputePeak> peak = measure_compute_peak(kind, pool, 3);
    return peak.has_value() ? peak->median() : 0.0;
  };
  c.f32_gmacs = peak_of(MacKind::kF32);
  c.bf16_gmacs = bf16_gemm_native() ? peak_of(MacKind::kBf16) : 0.0;
  return c;
}

}  // namespace kvlab
