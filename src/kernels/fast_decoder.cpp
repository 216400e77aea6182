#include "kernels/fast_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kvlab {

CpuIsa detect_cpu_isa() {
  const char* forced = std::getenv("KVLAB_CPU_ISA");
  if (forced != nullptr && std::string(forced) == "scalar") return CpuIsa::kScalar;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return CpuIsa::kAvx2;
  }
  return CpuIsa::kScalar;
}

std::string_view cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx2 ? "avx2" : "scalar"; }

FastDecoder::FastDecoder(int threads, CpuIsa isa) : isa_(isa), pool_(threads) {}

void FastDecoder::run(const LinearStepParams& params) {
  if (isa_ == CpuIsa::kScalar) {
    linear_step_reference(params);
  } else {
    linear_step_avx2(params, pool_);
  }
}

void FastDecoder::run(const MatVecParams& params) {
  if (isa_ == CpuIsa::kScalar) {
    matvec_reference(params);
  } else {
    matvec_avx2(params, pool_);
  }
}

void FastDecoder::prepare_rope(int64_t tokens, int64_t width, double theta) {
  if (width != rope_width_ || theta != rope_theta_) rope_positions_ = 0;
  if (tokens <= rope_positions_) return;
  const int64_t positions = std::max<int64_t>(tokens, 2 * rope_positions_);
  const int64_t half = width / 2;
  rope_table_.resize(static_cast<size_t>(positions * width));
  for (int64_t j = rope_positions_; j < positions; ++j) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(j) * std::pow(theta, -2.0 * static_cast<double>(i) /
                                                                        static_cast<double>(width));
      rope_table_[static_cast<size_t>(j * width + i)] = static_cast<float>(std::cos(angle));
      rope_table_[static_cast<size_t>(j * width + half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  rope_positions_ = positions;
  rope_width_ = width;
  rope_theta_ = theta;
}

void FastDecoder::run(const DecodeParams& params) {
  if (isa_ == CpuIsa::kScalar) {
    decode_attention_reference(params);
    return;
  }
  if (params.rope_on_read) {
    int64_t tokens = 0;
    for (int64_t b = 0; b < params.n_seqs; ++b) {
      const int64_t pages = params.pages.indptr[b + 1] - params.pages.indptr[b];
      tokens = std::max<int64_t>(tokens, pages * params.pages.page_size);
    }
    prepare_rope(tokens, params.key_width, params.rope_theta);
  }
  decode_attention_avx2(params, pool_, workspace_, rope_table_);
}

}  // namespace kvlab
