#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/linear_attention_step.h"
#include "kernels/matvec.h"
#include "kernels/thread_pool.h"

namespace kvlab {

enum class CpuIsa { kScalar, kAvx2 };

// The ISA decode runs on: AVX2+FMA+F16C when the CPU has them, unless the environment
// variable KVLAB_CPU_ISA=scalar forces the reference (tests run both paths in one binary).
CpuIsa detect_cpu_isa();
std::string_view cpu_isa_name(CpuIsa isa);

// What the AVX2 kernel keeps between calls: it only grows, so steady-state decode allocates
// nothing.
struct DecodeWorkspace {
  std::vector<float> floats;        // partials and per-item scratch
  std::vector<int64_t> tokens;      // per sequence
  std::vector<int64_t> item_start;  // per sequence + 1
};

// Flash-decoding on the CPU: each sequence's tokens are split into chunks spread over a
// persistent thread pool; every chunk keeps an online-softmax partial (max, sum,
// accumulator) for all heads of one group, so each cached row is loaded once per group, not
// once per head; partials are merged at the end. The workspace grows to the largest batch
// seen and is reused: steady-state decode allocates nothing.
class FastDecoder {
 public:
  explicit FastDecoder(int threads, CpuIsa isa = detect_cpu_isa());

  void run(const DecodeParams& params);
  // Linear attention's recurrent step (its state instead of a cache).
  void run(const LinearStepParams& params);
  // The dense layers around attention (projections, MLP, LM head).
  void run(const MatVecParams& params);
  // RoPE on read: extends the cos/sin table to `tokens` positions ahead of time, so a decode loop
  // that calls this once with its longest context never grows it between steps.
  void prepare_rope(int64_t tokens, int64_t width, double theta);
  CpuIsa isa() const { return isa_; }
  int threads() const { return pool_.size(); }

 private:
  CpuIsa isa_;
  ThreadPool pool_;
  DecodeWorkspace workspace_;
  // RoPE on read: cos/sin per cached position, extended (doubling) as contexts grow
  std::vector<float> rope_table_;
  int64_t rope_positions_ = 0;
  int64_t rope_width_ = 0;
  double rope_theta_ = 0;
};

// The AVX2 kernel (decode_attention_avx2.cpp, built with -mavx2 -mfma -mf16c).
// rope_table: [positions][key_width] = cos(j·θ_i) for i < key_width/2, then sin(j·θ_i).
void decode_attention_avx2(const DecodeParams& params, ThreadPool& pool, DecodeWorkspace& workspace,
                           const std::vector<float>& rope_table);

}  // namespace kvlab
