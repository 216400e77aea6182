// The dense products of a decode step, in the step's order, timed by matrix: a Llama-style gqa:4
// model's layers (q, k, v, o, up, gate, down; d 1024, 16 heads of 64, SwiGLU width 4096, 16
// layers: the d 1024 × 16 model of `kvlab bench generate`), weights of DTYPE (bf16, q8_0 or q4_0;
// default bf16; or f32, f16) in the order the decoder stores them on this CPU
// (fastest_weight_order), each step
// through FastDecoder::run as the decoder calls it. Per batch: the median step's ms, GMAC/s, and
// each matrix's ms summed over the layers (mean of the steps after the first) — where the dense
// part of a batched step goes. With `--expanded-vs-int8` (q8_0 or q4_0 panels, a CPU with AMX and
// AVX-512 BF16): the two AMX kernels over the same panels, matvec_amx_quant_panels (int8 tiles) and
// matvec_amx_expanded_panels (expanded to bf16), called directly and alternating step by step at
// 16…128 rows of x (or KVLAB_AB_ROWS); per batch each one's median step and int8 ÷ expanded. With
// `--shared-vs-single`: the step as the decoder runs it (q, k and v in one call of
// FastDecoder::run, up and gate in one: x prepared once for them) against every product in a
// call of its own, alternating step by step at 1…64 rows; each one's median step and single ÷
// shared. With `--rows-vs-panels` (f32, f16, q8_0 or q4_0; with KVLAB_CPU_ISA=avx2 also bf16): the
// weights also as rows, the row kernel of the decoder's ISA over them (matvec_avx512, or
// matvec_avx2) against its panel kernel over the panels (matvec_float_panels or
// matvec_quant_panels, or matvec_avx2_panels or matvec_avx2_quant_panels),
// alternating step by step at 1…16 rows (or KVLAB_AB_ROWS); rows ÷ panels. Built with
// -DKVLAB_AB_A=f_a -DKVLAB_AB_B=f_b (two builds of one kernel, renamed; bench/kernel_ab.sh makes
// them), `--ab` does the same for those two at 1…64 rows (or KVLAB_AB_ROWS, e.g. 48,64,96,128):
// old ÷ new. Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/dense_step_shapes.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_spec.a build/src/libkvlab_report.a -ldnnl -lfmt -lpthread -o /tmp/dss
//   /tmp/dss THREADS [DTYPE [--expanded-vs-int8 | --shared-vs-single | --ab]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kernels/compute_peak.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/weight_allocator.h"

#ifdef KVLAB_AB_A
namespace kvlab {
void KVLAB_AB_A(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
void KVLAB_AB_B(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
}  // namespace kvlab
#endif

using namespace kvlab;

namespace {

using Clock = std::chrono::steady_clock;

struct Matrix {
  const char* name;
  int64_t out, in;
};
constexpr Matrix kLayer[] = {{"q", 1024, 1024},   {"k", 256, 1024},   {"v", 256, 1024},
                             {"o", 1024, 1024},   {"up", 4096, 1024}, {"gate", 4096, 1024},
                             {"down", 1024, 4096}};
constexpr int kMatrices = sizeof kLayer / sizeof kLayer[0];
constexpr int kLayers = 16, kSteps = 9;

// Which of the two kernels an alternating comparison times at `step`: a b b a, a b b a, … Each
// kernel follows either one as often, and neither is always the earlier of a pair. Plain a b a b
// timed a kernel against itself slower as a than as b at 16 rows of x
// (docs/kernels/dense-decode.md, "The kernel A/B harness timed its first kernel slower").
constexpr int ab_side(int step) { return step % 4 == 0 || step % 4 == 3 ? 0 : 1; }

// The rows of x --ab (and, where set, --expanded-vs-int8) runs: KVLAB_AB_ROWS (e.g.
// "48,64,96,128"; each 1..128), or 1…64
std::vector<int64_t> ab_rows() {
  const char* list = std::getenv("KVLAB_AB_ROWS");
  if (list == nullptr) return {1, 2, 4, 8, 16, 24, 32, 48, 64};
  std::vector<int64_t> rows;
  for (const char* at = list; *at != '\0';) {
    char* end = nullptr;
    const long n = std::strtol(at, &end, 10);
    if (end == at || n < 1 || n > 128 || (*end != ',' && *end != '\0')) {
      std::fprintf(stderr, "KVLAB_AB_ROWS: %s: must be a list of rows 1..128, e.g. 48,64,96\n",
                   list);
      std::exit(2);
    }
    rows.push_back(n);
    at = *end == ',' ? end + 1 : end;
  }
  return rows;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc >= 2 && argc <= 4 ? std::atoi(argv[1]) : 0;
  const std::string dtype_arg = argc >= 3 ? argv[2] : "bf16";
  const DType dtype = dtype_arg == "q8_0"   ? DType::kQ8_0
                      : dtype_arg == "q4_0" ? DType::kQ4_0
                      : dtype_arg == "f32"  ? DType::kF32
                      : dtype_arg == "f16"  ? DType::kF16
                                            : DType::kBf16;
  const bool against_int8 = argc == 4 && std::string(argv[3]) == "--expanded-vs-int8";
  const bool shared_vs_single = argc == 4 && std::string(argv[3]) == "--shared-vs-single";
  const bool rows_vs_panels = argc == 4 && std::string(argv[3]) == "--rows-vs-panels";
#ifdef KVLAB_AB_A
  const bool ab = argc == 4 && std::string(argv[3]) == "--ab";
#else
  const bool ab = false;
#endif
  if (threads < 1 || threads > 256 || (dtype == DType::kBf16 && dtype_arg != "bf16") ||
      (argc == 4 && !ab && !shared_vs_single && !rows_vs_panels &&
       (!against_int8 || dtype == DType::kBf16))) {
    std::fprintf(stderr,
                 "usage: %s THREADS (1..256) [DTYPE: bf16 | f32 | f16 | q8_0 | q4_0 "
                 "[--expanded-vs-int8 | --shared-vs-single | --rows-vs-panels | --ab "
                 "(built with KVLAB_AB_A, KVLAB_AB_B)]]\n",
                 argv[0]);
    return 2;
  }
  const CpuIsa isa = detect_cpu_isa();
  if (against_int8 && quant_expand_min_rows(dtype, isa) == 0) {
    std::fprintf(stderr,
                 "--expanded-vs-int8: this CPU does not run the expanded kernel (AMX and "
                 "AVX-512 BF16)\n");
    return 2;
  }
  const WeightOrder order = fastest_weight_order(dtype, isa);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<std::vector<std::byte, WeightAllocator<std::byte>>> weights, weight_rows;
  for (int l = 0; l < kLayers; ++l) {
    for (const Matrix& m : kLayer) {
      std::vector<float> values(static_cast<size_t>(m.out * m.in));
      for (float& v : values) v = normal(rng);
      std::vector<std::byte> rows(static_cast<size_t>(m.out * row_bytes(dtype, m.in)));
      store_rows(values.data(), m.out, m.in, dtype, rows.data());
      auto& stored = weights.emplace_back();
      if (order == WeightOrder::kPanels) {
        stored.resize(static_cast<size_t>(panel_bytes(dtype, m.out, m.in)));
        pack_panels(dtype, rows.data(), m.out, m.in, stored.data());
        if (rows_vs_panels) weight_rows.emplace_back(rows.begin(), rows.end());
      } else {
        stored.assign(rows.begin(), rows.end());
      }
    }
  }
  FastDecoder decoder(threads, isa);
  std::printf("%s, %.*s, %d threads, %s weights as %s, %d layers\n", cpu_model_name().c_str(),
              static_cast<int>(cpu_isa_name(isa).size()), cpu_isa_name(isa).data(), threads,
              dtype_arg.c_str(), weight_order_name(order), kLayers);
  // y: a region for each of up to three products that run together
  constexpr int64_t kYRegion = 128 * 4096;
  std::vector<float> x(128 * 4096), y(3 * kYRegion);
  for (float& v : x) v = normal(rng);
  using Kernel = void (*)(const MatVecParams&, ThreadPool&, MatVecScratch&);
  // kernels a and b on the step's matrices, alternating step by step (ab_side), at each of
  // `rows`: each one's median step (its first a warm-up) and a ÷ b
  // (with --rows-vs-panels, a reads the weights as rows)
  const auto alternate = [&](Kernel a, Kernel b, const char* a_name, const char* b_name,
                             const std::vector<int64_t>& rows) {
    MatVecScratch scratch;
    for (int64_t n : rows) {
      std::vector<double> ms[2];
      for (int step = 0; step < 2 * kSteps; ++step) {
        const auto step_start = Clock::now();
        const int side = ab_side(step);
        const bool as_rows = rows_vs_panels && side == 0;
        for (size_t k = 0; k < weights.size(); ++k) {
          const Matrix& m = kLayer[k % kMatrices];
          MatVecParams p{(as_rows ? weight_rows : weights)[k].data(),
                         nullptr,
                         x.data(),
                         y.data(),
                         n,
                         m.in,
                         m.out,
                         0,
                         0,
                         dtype};
          p.weight_order = as_rows ? WeightOrder::kRows : order;
          (side == 0 ? a : b)(p, decoder.pool(), scratch);
        }
        ms[side].push_back(ms_since(step_start));
      }
      for (auto& v : ms) std::sort(v.begin() + 1, v.end());
      const double a_ms = ms[0][kSteps / 2 + 1], b_ms = ms[1][kSteps / 2 + 1];
      std::printf("batch %3lld: %s %6.2f ms, %s %6.2f ms, %s / %s %.3f\n",
                  static_cast<long long>(n), a_name, a_ms, b_name, b_ms, a_name, b_name,
                  a_ms / b_ms);
    }
  };
  if (against_int8) {
    alternate(matvec_amx_quant_panels, matvec_amx_expanded_panels, "int8 tiles", "expanded",
              std::getenv("KVLAB_AB_ROWS") ? ab_rows()
                                           : std::vector<int64_t>{16, 17, 24, 32, 48, 64, 96, 128});
    return 0;
  }
  if (rows_vs_panels) {  // the row kernel against the panel kernel of the decoder's ISA
    if (order != WeightOrder::kPanels || (dtype == DType::kBf16 && isa != CpuIsa::kAvx2)) {
      std::fprintf(stderr, "--rows-vs-panels: %s weights are not stored in panels for %.*s\n",
                   dtype_arg.c_str(), static_cast<int>(cpu_isa_name(isa).size()),
                   cpu_isa_name(isa).data());
      return 2;
    }
    const std::vector<int64_t> rows =
        std::getenv("KVLAB_AB_ROWS") ? ab_rows() : std::vector<int64_t>{1, 2, 4, 8, 16};
    const bool quant = takes_quant_panels(dtype);
    if (isa == CpuIsa::kAvx2) {
      const Kernel panels = quant ? static_cast<Kernel>(matvec_avx2_quant_panels)
                                  : static_cast<Kernel>(matvec_avx2_panels);
      alternate(matvec_avx2, panels, "rows", "panels", rows);
    } else {
      const Kernel panels = quant ? static_cast<Kernel>(matvec_quant_panels)
                                  : static_cast<Kernel>(matvec_float_panels);
      alternate(matvec_avx512, panels, "rows", "panels", rows);
    }
    return 0;
  }
  if (shared_vs_single) {  // the decoder's run(products, count) against run(p) one by one
    for (int64_t n : {1, 2, 4, 8, 16, 24, 32, 48, 64}) {
      std::vector<double> ms[2];
      for (int step = 0; step < 2 * kSteps; ++step) {
        const auto step_start = Clock::now();
        for (size_t first = 0; first < weights.size();) {
          // q, k, v together, then o, then up and gate together, then down
          const size_t k0 = first % kMatrices;
          const size_t count = ab_side(step) == 1 ? 1 : k0 == 0 ? 3 : k0 == 4 ? 2 : 1;
          MatVecParams products[3];
          for (size_t i = 0; i < count; ++i) {
            const Matrix& m = kLayer[(first + i) % kMatrices];
            products[i] = MatVecParams{weights[first + i].data(),
                                       nullptr,
                                       x.data(),
                                       y.data() + static_cast<int64_t>(i) * kYRegion,
                                       n,
                                       m.in,
                                       m.out,
                                       0,
                                       0,
                                       dtype};
            products[i].weight_order = order;
          }
          decoder.run(products, static_cast<int64_t>(count));
          first += count;
        }
        ms[ab_side(step)].push_back(ms_since(step_start));
      }
      for (auto& v : ms) std::sort(v.begin() + 1, v.end());
      const double shared_ms = ms[0][kSteps / 2 + 1], single_ms = ms[1][kSteps / 2 + 1];
      std::printf("batch %3lld: shared %6.2f ms, single %6.2f ms, single / shared %.3f\n",
                  static_cast<long long>(n), shared_ms, single_ms, single_ms / shared_ms);
    }
    return 0;
  }
#ifdef KVLAB_AB_A
  if (ab) {
    alternate(KVLAB_AB_A, KVLAB_AB_B, "old", "new", ab_rows());
    return 0;
  }
#endif
  for (int64_t n : {1, 8, 16, 32, 64}) {
    double per_matrix[kMatrices] = {};
    std::vector<double> steps_ms;
    for (int step = 0; step < kSteps; ++step) {
      const auto step_start = Clock::now();
      for (size_t k = 0; k < weights.size(); ++k) {
        const Matrix& m = kLayer[k % kMatrices];
        MatVecParams p{weights[k].data(), nullptr, x.data(), y.data(), n, m.in, m.out, 0, 0, dtype};
        p.weight_order = order;
        const auto start = Clock::now();
        decoder.run(p);
        if (step > 0) per_matrix[k % kMatrices] += ms_since(start) / (kSteps - 1);
      }
      steps_ms.push_back(ms_since(step_start));
    }
    std::sort(steps_ms.begin() + 1, steps_ms.end());
    const double median_ms = steps_ms[kSteps / 2 + 1];
    double macs = 0;
    for (const Matrix& m : kLayer) macs += static_cast<double>(kLayers * m.out * m.in * n);
    std::printf("batch %2lld: %6.2f ms (%5.1f GMAC/s) |", static_cast<long long>(n), median_ms,
                macs / median_ms / 1e6);
    for (int k = 0; k < kMatrices; ++k) std::printf(" %s %.2f", kLayer[k].name, per_matrix[k]);
    std::printf("\n");
  }
}
