// q8_0 and q4_0 weights' kernels side by side, GMAC/s and GB/s of weights (median of 9) per rows
// of x: ggml's block order (matvec_avx512), panels (matvec_quant_panels) and, where the CPU has AMX
// int8, panels by tile multiplies (matvec_amx_quant_panels; "-" elsewhere), the same weights in
// each. Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/matvec_quant_kernels.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/mvq
//   /tmp/mvq THREADS OUT IN [CYCLE_MB]      (q8_0, then q4_0)
// With CYCLE_MB, that many MB of OUT x IN matrices are cycled through (each rep multiplies every
// one), so the weights stream from memory as in a decode step; without it one matrix is reused.
// The largest difference from ggml order's outputs is printed beside (sums in another order:
// ~1e-5 relative).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "bench/matvec_bench_args.h"
#include "kernels/compute_peak.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/weight_allocator.h"

using namespace kvlab;

namespace {

using Bytes = std::vector<std::byte, WeightAllocator<std::byte>>;
using Kernel = std::function<void(const MatVecParams&, ThreadPool&, MatVecScratch&)>;
// the one-product form of a kernel that also takes products sharing x
using OneProduct = void (*)(const MatVecParams&, ThreadPool&, MatVecScratch&);

struct Order {
  const char* name;
  WeightOrder order;
  Kernel kernel;  // empty: not on this CPU
  Bytes weights;  // every matrix, matrix_bytes apart
  int64_t matrix_bytes;
};

}  // namespace

namespace {

void compare(DType dtype, const MatVecBenchArgs& args) {
  const int threads = args.threads;
  const int64_t out = args.out, in = args.in, cycle_mb = args.cycle_mb;
  const int64_t rows_bytes = out * row_bytes(dtype, in);
  const int64_t matrices = std::max<int64_t>(1, (cycle_mb << 20) / rows_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> values(static_cast<size_t>(out * in));
  for (float& v : values) v = normal(rng);
  std::vector<std::byte> one(static_cast<size_t>(rows_bytes));
  store_rows(values.data(), out, in, dtype, one.data());
  std::vector<std::byte> panels(static_cast<size_t>(quant_panel_bytes(dtype, out, in)));
  pack_quant_panels(dtype, one.data(), out, in, panels.data());
  std::vector<Order> orders;
  orders.push_back({"ggml order", WeightOrder::kRows, matvec_avx512, {}, rows_bytes});
  orders.push_back({"panels",
                    WeightOrder::kPanels,
                    OneProduct(matvec_quant_panels),
                    {},
                    static_cast<int64_t>(panels.size())});
  orders.push_back({"AMX panels",
                    WeightOrder::kPanels,
                    cpu_supports(CpuIsa::kAmx) && cpu_has_amx_int8()
                        ? Kernel(OneProduct(matvec_amx_quant_panels))
                        : Kernel(),
                    {},
                    static_cast<int64_t>(panels.size())});
  for (Order& o : orders) {
    const std::vector<std::byte>& src = o.order == WeightOrder::kRows ? one : panels;
    o.weights.resize(static_cast<size_t>(matrices * o.matrix_bytes));
    for (int64_t m = 0; m < matrices; ++m) {
      std::copy(src.begin(), src.end(), o.weights.begin() + m * o.matrix_bytes);
    }
  }
  ThreadPool pool(threads);
  MatVecScratch scratch;
  std::printf("%s, %d threads, %lld x %lld %s weights, %lld matrices cycled; GMAC/s (GB/s)\n",
              cpu_model_name().c_str(), threads, static_cast<long long>(out),
              static_cast<long long>(in), std::string(dtype_name(dtype)).c_str(),
              static_cast<long long>(matrices));
  for (int64_t n : {1, 2, 3, 4, 8, 16, 32, 64}) {
    std::vector<float> x(static_cast<size_t>(in * n));
    for (float& v : x) v = normal(rng);
    std::vector<float> first;
    std::printf("n %2lld:", static_cast<long long>(n));
    for (const Order& o : orders) {
      if (!o.kernel) {
        std::printf(" | %s -", o.name);
        continue;
      }
      std::vector<float> y(static_cast<size_t>(out * n));
      auto run = [&] {
        for (int64_t m = 0; m < matrices; ++m) {
          MatVecParams p{o.weights.data() + m * o.matrix_bytes,
                         nullptr,
                         x.data(),
                         y.data(),
                         n,
                         in,
                         out,
                         0,
                         0,
                         dtype};
          p.weight_order = o.order;
          o.kernel(p, pool, scratch);
        }
      };
      const double s = median_seconds(run);
      if (first.empty()) first = y;
      double largest = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        largest = std::max(largest, static_cast<double>(std::fabs(y[i] - first[i])));
      }
      const double macs = static_cast<double>(matrices * n * out * in);
      std::printf(" | %s %6.1f (%5.1f) %.1g", o.name, macs / s / 1e9,
                  static_cast<double>(matrices * o.matrix_bytes) / s / 1e9, largest);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<MatVecBenchArgs> args =
      parse_matvec_bench_args(argc, argv, cpu_has_avx512_vnni(), "AVX-512 VNNI");
  if (!args) return 2;
  compare(DType::kQ8_0, *args);
  compare(DType::kQ4_0, *args);
}
