// f32 weight rows at 4…128 rows of x: the AVX-512 matrix-vector kernel (matvec_avx512) against
// oneDNN's sgemm (matvec_gemm_f32) over the d D × F model's shapes (4 layers of q, k, v, o, gate,
// up, down with gqa:4 keys and values), alternating in one process, medians of 11; the measurement
// behind kF32GemmMinRows (docs/kernels/dense-decode.md). Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -fopenmp -I. -Isrc bench/f32_gemm_rows.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/f32g
//   /tmp/f32g 1024 2816   # D, F; on a CPU with AVX-512
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/matvec.h"
#include "kernels/thread_pool.h"
using namespace kvlab;
int main(int argc, char** argv) {
  int threads = 2;
  omp_set_num_threads(threads);
  ThreadPool pool(threads);
  MatVecScratch scratch;
  int D = argc > 1 ? atoi(argv[1]) : 1024, F = argc > 2 ? atoi(argv[2]) : 2816;
  struct Shape {
    int in, out;
  };
  std::vector<Shape> shapes = {{D, D}, {D, D / 4}, {D, D / 4}, {D, D}, {D, F}, {D, F}, {F, D}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> w;
  for (auto s : shapes) {
    w.emplace_back((size_t)s.in * s.out);
    for (auto& v : w.back()) v = nd(rng) * 0.02f;
  }
  std::vector<float> x((size_t)256 * F), y((size_t)256 * F);
  for (auto& v : x) v = nd(rng);
  for (int n : {4, 8, 16, 24, 32, 48, 64, 128}) {
    std::vector<double> ta, tb;
    for (int rep = 0; rep < 11; ++rep) {
      for (int which = 0; which < 2; ++which) {
        auto t0 = std::chrono::steady_clock::now();
        for (int layer = 0; layer < 4; ++layer)
          for (size_t i = 0; i < shapes.size(); ++i) {
            MatVecParams p;
            p.weight = w[i].data();
            p.weight_dtype = DType::kF32;
            p.x = x.data();
            p.y = y.data();
            p.n = n;
            p.in = shapes[i].in;
            p.out = shapes[i].out;
            if (which == 0)
              matvec_avx512(p, pool, scratch);
            else
              matvec_gemm_f32(p);
          }
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
        (which == 0 ? ta : tb).push_back(t);
      }
    }
    std::sort(ta.begin(), ta.end());
    std::sort(tb.begin(), tb.end());
    double macs = 0;
    for (auto s : shapes) macs += 4.0 * s.in * s.out * n;
    printf("n %3d  avx512 %7.2f ms (%5.1f G/s)  sgemm %7.2f ms (%5.1f G/s)  avx512/sgemm %.2f\n", n,
           ta[5], macs / ta[5] / 1e6, tb[5], macs / tb[5] / 1e6, ta[5] / tb[5]);
  }
}
