#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/thread_pool.h"

namespace kvlab {

// The multiply-add precisions whose peak rate `kvlab bench compute` measures: f32 FMA, bf16
// dot products (vdpbf16ps: two products per f32 lane; AMX's tdpbf16ps where the decoder runs
// AMX, as its dense layers then do), int8 dot products (vpdpbusd: four u8 × s8 products per
// i32 lane) and int8 blocks: AMX's int8 tile multiply (tdpbssd) at 32 inputs a multiply, the
// depth of one q8_0 block, as the dense layers multiply q8_0 weights where they run it (each
// block's sums kept apart for its scales; a multiply takes as long at 64 inputs, so the tile's
// full-depth rate is twice this). And, where the decoder runs AMX, bf16 tiles loaded: the same
// tile multiplies with their four operand tiles loaded from L1 before every four, as a tile GEMM
// must. No memory traffic either, but it is the rate a product that reads its operands can reach,
// which on a shared VM can fall well below the peak while the peak holds
// (docs/kernels/dense-decode.md, "The tile unit's rates").
enum class MacKind { kF32, kBf16, kInt8, kInt8Blocks, kBf16Loaded };
std::string_view mac_kind_name(MacKind kind);

// Peak multiply-add rate of one kind on all of a pool's threads: each thread runs a register
// loop of independent dot-product chains (no memory traffic), repeated; rates in 10^9
// multiply-adds per second. `isa` names the instructions used (e.g. "avx512 vdpbf16ps").
struct ComputePeak {
  MacKind kind = MacKind::kF32;
  std::string_view isa;
  int threads = 0;
  std::vector<double> gmacs;  // one per repeat, in run order
  double median() const;
  double min() const;
  double max() const;
};

// nullopt where this CPU has no instruction for the kind (bf16 needs AVX-512 BF16; int8 AVX-512
// VNNI's vpdpbusd, else AVX2's vpmaddubsw; int8 blocks a decoder whose q8_0 weights run AMX tiles;
// f32 AVX2+FMA). `cap_avx2` measures with the AVX2 loop even where AVX-512 is there (as
// KVLAB_CPU_ISA=avx2 caps the kernels).
std::optional<ComputePeak> measure_compute_peak(MacKind kind, ThreadPool& pool, int repeats,
                                                bool cap_avx2 = false);

// "model name" of /proc/cpuinfo (e.g. "AMD EPYC 9R14 96-Core Processor"), or "unknown CPU".
std::string cpu_model_name();

// The register loops (compute_peak_avx2.cpp, compute_peak_avx512.cpp): `iterations` rounds of
// their chains; return the multiply-adds done and fold the accumulators into *sink.
int64_t mac_loop_f32_avx2(int64_t iterations, float* sink);
int64_t mac_loop_int8_avx2(int64_t iterations, float* sink);
int64_t mac_loop_f32_avx512(int64_t iterations, float* sink);
int64_t mac_loop_bf16_avx512(int64_t iterations, float* sink);
int64_t mac_loop_int8_avx512(int64_t iterations, float* sink);
// AMX (compute_peak_amx.cpp): bf16 tile multiplies, as the dense kernels run them with AMX (the
// operands resident, or loaded from L1 every round); int8 tile multiplies at 32 inputs, as the
// q8_0 kernel runs them.
int64_t mac_loop_bf16_amx(int64_t iterations, float* sink);
int64_t mac_loop_bf16_amx_loaded(int64_t iterations, float* sink);
int64_t mac_loop_int8_amx(int64_t iterations, float* sink);

}  // namespace kvlab
