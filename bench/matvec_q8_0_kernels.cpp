// q8_0 weights' AVX-512 VNNI kernels side by side, GMAC/s and GB/s of weights (median of 9) per
// rows of x: ggml's block order (matvec_avx512) and the interleaved order
// (matvec_q8_0_interleaved), the same weights in both. Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/matvec_q8_0_kernels.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/mvq
//   /tmp/mvq THREADS OUT IN [CYCLE_MB]
// With CYCLE_MB, that many MB of OUT x IN matrices are cycled through (each rep multiplies every
// one), so the weights stream from memory as in a decode step; without it one matrix is reused.
// The largest difference between the two kernels' outputs is printed beside (sums in another
// order: ~1e-5 relative).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/matvec_bench_args.h"
#include "kernels/compute_peak.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

using namespace kvlab;

int main(int argc, char** argv) {
  const std::optional<MatVecBenchArgs> args = parse_matvec_bench_args(
      argc, argv, fastest_weight_order(DType::kQ8_0) == WeightOrder::kInterleaved, "AVX-512 VNNI");
  if (!args) return 2;
  const int threads = args->threads;
  const int64_t out = args->out, in = args->in, cycle_mb = args->cycle_mb;
  const int64_t matrix_bytes = out * row_bytes(DType::kQ8_0, in);
  const int64_t matrices = std::max<int64_t>(1, (cycle_mb << 20) / matrix_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(out * in));
  for (float& v : values) v = normal(rng);
  std::vector<std::byte> one(static_cast<size_t>(matrix_bytes));
  std::vector<std::byte> one_interleaved(one.size());
  store_rows(values.data(), out, in, DType::kQ8_0, one.data());
  interleave_q8_0_rows(one.data(), out, in, one_interleaved.data());
  std::vector<std::byte> ggml(static_cast<size_t>(matrices * matrix_bytes));
  std::vector<std::byte> interleaved(ggml.size());
  for (int64_t m = 0; m < matrices; ++m) {
    std::copy(one.begin(), one.end(), ggml.begin() + m * matrix_bytes);
    std::copy(one_interleaved.begin(), one_interleaved.end(),
              interleaved.begin() + m * matrix_bytes);
  }
  ThreadPool pool(threads);
  MatVecScratch scratch;
  std::printf("%s, %d threads, %lld x %lld q8_0 weights, %lld matrices cycled\n",
              cpu_model_name().c_str(), threads, static_cast<long long>(out),
              static_cast<long long>(in), static_cast<long long>(matrices));
  for (int64_t n : {1, 2, 4, 16, 32, 64}) {
    std::vector<float> x(static_cast<size_t>(in * n));
    std::vector<float> y_ggml(static_cast<size_t>(out * n)), y_interleaved(y_ggml.size());
    for (float& v : x) v = normal(rng);
    auto seconds = [&](bool interleaved_order) {
      auto run = [&] {
        for (int64_t m = 0; m < matrices; ++m) {
          MatVecParams p{nullptr, nullptr, x.data(), nullptr, n, in, out, 0, 0, DType::kQ8_0};
          if (interleaved_order) {
            p.weight = interleaved.data() + m * matrix_bytes;
            p.y = y_interleaved.data();
            p.weight_order = WeightOrder::kInterleaved;
            matvec_q8_0_interleaved(p, pool, scratch);
          } else {
            p.weight = ggml.data() + m * matrix_bytes;
            p.y = y_ggml.data();
            matvec_avx512(p, pool, scratch);
          }
        }
      };
      return median_seconds(run);
    };
    const double ggml_s = seconds(false), interleaved_s = seconds(true);
    double largest = 0;
    for (size_t i = 0; i < y_ggml.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::fabs(y_ggml[i] - y_interleaved[i])));
    }
    const double macs = static_cast<double>(matrices * n * out * in);
    const double bytes = static_cast<double>(matrices * matrix_bytes);
    std::printf(
        "n %2lld: ggml order %6.1f GMAC/s %5.1f GB/s | interleaved %6.1f GMAC/s %5.1f GB/s | "
        "largest difference %.2g\n",
        static_cast<long long>(n), macs / ggml_s / 1e9, bytes / ggml_s / 1e9,
        macs / interleaved_s / 1e9, bytes / interleaved_s / 1e9, largest);
  }
}
