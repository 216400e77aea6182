// bf16 weights' dense-layer kernels side by side, GMAC/s (median of 9) per rows of x: on rows, the
// AVX-512 kernel that widens bf16 to f32, AVX-512 BF16's vdpbf16ps kernel (matvec_bf16_products)
// and oneDNN's bf16 matmul (matvec_gemm_bf16); on the same weights in panels, matvec_bf16_panels
// and, where the CPU has AMX, matvec_amx_bf16_panels (0 elsewhere).
// Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/matvec_bf16_kernels.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/mvb
//   /tmp/mvb THREADS OUT IN [CYCLE_MB]
// With CYCLE_MB, that many MB of OUT x IN matrices are cycled through (each rep multiplies every
// one), so the weights stream from memory as in a decode step; without it one matrix is reused.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/matvec_bench_args.h"
#include "kernels/compute_peak.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/weight_allocator.h"

using namespace kvlab;

int main(int argc, char** argv) {
  const std::optional<MatVecBenchArgs> args = parse_matvec_bench_args(
      argc, argv, cpu_supports(CpuIsa::kAvx512) && cpu_has_avx512_bf16(), "AVX-512 BF16");
  if (!args) return 2;
  const int threads = args->threads;
  const int64_t out = args->out, in = args->in, cycle_mb = args->cycle_mb;
  const int64_t matrices = std::max<int64_t>(1, (cycle_mb << 20) / (out * in * 2));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> weights(static_cast<size_t>(matrices * out * in));
  for (uint16_t& w : weights) w = f32_to_bf16(normal(rng));
  const int64_t panel_bytes = bf16_panel_bytes(out, in);
  std::vector<std::byte, WeightAllocator<std::byte>> panels(
      static_cast<size_t>(matrices * panel_bytes));
  for (int64_t m = 0; m < matrices; ++m) {
    pack_bf16_panels(weights.data() + m * out * in, out, in, panels.data() + m * panel_bytes);
  }
  ThreadPool pool(threads);
  MatVecScratch scratch;
  std::printf("%s, %d threads, %lld x %lld bf16 weights, %lld matrices cycled\n",
              cpu_model_name().c_str(), threads, static_cast<long long>(out),
              static_cast<long long>(in), static_cast<long long>(matrices));
  for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) {
    std::vector<float> x(static_cast<size_t>(in * n)), y(static_cast<size_t>(out * n));
    for (float& v : x) v = normal(rng);
    auto gmacs = [&](auto kernel, WeightOrder order = WeightOrder::kRows) {
      auto run = [&] {
        for (int64_t m = 0; m < matrices; ++m) {
          MatVecParams p{weights.data() + m * out * in,
                         nullptr,
                         x.data(),
                         y.data(),
                         n,
                         in,
                         out,
                         0,
                         0,
                         DType::kBf16};
          if (order == WeightOrder::kPanels) p.weight = panels.data() + m * panel_bytes;
          p.weight_order = order;
          kernel(p);
        }
      };
      return static_cast<double>(matrices * n * out * in) / median_seconds(run) / 1e9;
    };
    const double amx =
        cpu_supports(CpuIsa::kAmx)
            ? gmacs([&](const MatVecParams& p) { matvec_amx_bf16_panels(p, pool, scratch); },
                    WeightOrder::kPanels)
            : 0.0;
    std::printf(
        "n %2lld: widened %6.1f  vdpbf16ps %6.1f  oneDNN %6.1f  panels %6.1f  AMX panels %6.1f "
        "GMAC/s\n",
        static_cast<long long>(n),
        gmacs([&](const MatVecParams& p) { matvec_avx512(p, pool, scratch); }),
        gmacs([&](const MatVecParams& p) { matvec_bf16_products(p, pool, scratch); }),
        gmacs([&](const MatVecParams& p) { matvec_gemm_bf16(p, scratch); }),
        gmacs([&](const MatVecParams& p) { matvec_bf16_panels(p, pool, scratch); },
              WeightOrder::kPanels),
        amx);
  }
}
