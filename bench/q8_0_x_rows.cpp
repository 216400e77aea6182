// How long quantize_q8_0_row_avx512 takes to round rows of x to q8_0 (the x of the kernels over
// q8_0 and q4_0 panels): 16 rows of 1,024 and of 4,096 inputs, the best of 400 passes, µs and ns
// an element. Not part of the build; after `make build`, on a CPU with AVX-512:
//   g++ -O2 -std=c++20 -I. -Isrc bench/q8_0_x_rows.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/q8x
//   /tmp/q8x
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/fast_decoder.h"
#include "kernels/q8_0_rows.h"

int main() {
  if (!kvlab::cpu_supports(kvlab::CpuIsa::kAvx512)) {
    std::fprintf(stderr, "q8_0_x_rows: this CPU has no AVX-512\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (const int64_t in : {1024, 4096}) {
    const int64_t rows = 16, blocks = in / 32;
    std::vector<float> x(static_cast<size_t>(rows * in));
    for (float& v : x) v = 3.0f * normal(rng);
    std::vector<int8_t> quants(x.size());
    std::vector<float> scales(static_cast<size_t>(rows * blocks));
    double best_us = 1e30;
    for (int pass = 0; pass < 400; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t b = 0; b < rows; ++b) {
        kvlab::quantize_q8_0_row_avx512(x.data() + b * in, in, quants.data() + b * in, 32,
                                        scales.data() + b * blocks, 1);
      }
      best_us = std::min(best_us, std::chrono::duration<double, std::micro>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
    }
    std::printf("%lld rows × %lld inputs: %.1f µs (%.3f ns an element)\n",
                static_cast<long long>(rows), static_cast<long long>(in), best_us,
                best_us * 1e3 / static_cast<double>(rows * in));
  }
  return 0;
}
