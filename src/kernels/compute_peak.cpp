#include "kernels/compute_peak.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "kernels/fast_decoder.h"
#include "report/statistics.h"

namespace kvlab {
namespace {

using Loop = int64_t (*)(int64_t, float*);

struct LoopChoice {
  Loop loop = nullptr;
  std::string_view isa;
};

LoopChoice choose_loop(MacKind kind, bool cap_avx2) {
  const bool avx512 = !cap_avx2 && cpu_supports(CpuIsa::kAvx512);
  switch (kind) {
    case MacKind::kF32:
      if (avx512) return {mac_loop_f32_avx512, "avx512 vfmadd231ps"};
      if (cpu_supports(CpuIsa::kAvx2)) return {mac_loop_f32_avx2, "avx2 vfmadd231ps"};
      return {};
    case MacKind::kBf16:
      if (avx512 && detect_cpu_isa() == CpuIsa::kAmx) return {mac_loop_bf16_amx, "amx tdpbf16ps"};
      if (avx512 && cpu_has_avx512_bf16()) return {mac_loop_bf16_avx512, "avx512 vdpbf16ps"};
      return {};
    case MacKind::kInt8:
      if (avx512 && __builtin_cpu_supports("avx512vnni")) {
        return {mac_loop_int8_avx512, "avx512 vpdpbusd"};
      }
      if (cpu_supports(CpuIsa::kAvx2)) return {mac_loop_int8_avx2, "avx2 vpmaddubsw, int16 sums"};
      return {};
    case MacKind::kBf16Loaded:
      if (avx512 && detect_cpu_isa() == CpuIsa::kAmx) {
        return {mac_loop_bf16_amx_loaded, "amx tdpbf16ps, 4 operand tiles loaded every 4"};
      }
      return {};
    case MacKind::kInt8Blocks:
      if (avx512 && quant_tile_min_rows(DType::kQ8_0) > 0) {
        return {mac_loop_int8_amx, "amx tdpbssd, 32 inputs a multiply"};
      }
      return {};
  }
  return {};
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU", family, model;
  auto value = [&line]() {
    const size_t colon = line.find(':');
    return colon == std::string::npos || colon + 2 > line.size() ? std::string()
                                                                 : line.substr(colon + 2);
  };
  while (std::getline(in, line) && line.find_first_not_of(" \t") != std::string::npos) {
    if (line.rfind("model name", 0) == 0) {
      name = value();
    } else if (line.rfind("cpu family", 0) == 0) {
      family = value();
    } else if (line.rfind("model\t", 0) == 0) {
      model = value();
    }
  }
  // virtual machines often say only "AMD EPYC": family and model tell Zen 4 (25) from Zen 5 (26)
  if (!family.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

std::string_view mac_kind_name(MacKind kind) {
  switch (kind) {
    case MacKind::kF32:
      return "f32";
    case MacKind::kBf16:
      return "bf16";
    case MacKind::kInt8:
      return "int8";
    case MacKind::kInt8Blocks:
      return "int8 blocks";
    case MacKind::kBf16Loaded:
      return "bf16 tiles loaded";
  }
  return "?";
}

double ComputePeak::median() const { return median_of(gmacs); }
double ComputePeak::min() const { return min_of(gmacs); }
double ComputePeak::max() const { return max_of(gmacs); }

std::optional<ComputePeak> measure_compute_peak(MacKind kind, ThreadPool& pool, int repeats,
                                                bool cap_avx2) {
  const LoopChoice choice = choose_loop(kind, cap_avx2);
  if (choice.loop == nullptr) return std::nullopt;
  ComputePeak peak;
  peak.kind = kind;
  peak.isa = choice.isa;
  peak.threads = pool.size();
  std::vector<float> sinks(static_cast<size_t>(pool.size()) * 16, 0.0f);  // a line per thread
  std::vector<int64_t> macs(static_cast<size_t>(pool.size()), 0);
  // ~20 ms per repeat at tens of G/s per thread: long against the pool's hand-off, short
  // enough for a few repeats
  constexpr int64_t kIterations = int64_t{1} << 21;
  for (int r = 0; r < repeats + 1; ++r) {  // the first round warms up clocks and the pool
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(pool.size(), [&](int64_t t) {
      macs[static_cast<size_t>(t)] = choice.loop(kIterations, &sinks[static_cast<size_t>(t) * 16]);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t total = 0;
    for (int64_t m : macs) total += m;
    if (r > 0) peak.gmacs.push_back(static_cast<double>(total) / seconds / 1e9);
  }
  return peak;
}

}  // namespace kvlab
