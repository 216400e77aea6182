#pragma once

#include <cstdint>
#include <string_view>

namespace kvlab {

// How a model stretches RoPE past the context it was pretrained on: Hugging Face's
// `rope_scaling` (or `rope_parameters`) types. Each one changes only the per-pair frequencies
// and two multipliers, so every place that turns a vector (nn, the decode runtime, the kernels)
// asks this one object.
//   none:   θ^(−2i/w)
//   linear: θ^(−2i/w) / factor (positions interpolated)
//   llama3: long wavelengths divided by factor, short ones kept, a smooth blend between
//           (wavelength thresholds original_context / low_freq_factor and / high_freq_factor)
//   yarn:   per pair a blend of interpolated and extrapolated frequencies with a linear ramp
//           over the correction range [beta_fast, beta_slow] rotations in original_context
//           (floored and ceiled, as DeepSeek's and Hugging Face's code do); cos and sin are
//           multiplied by attention_factor.
enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;
  int64_t original_context = 0;  // original_max_position_embeddings (llama3, yarn)
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0;
  double beta_fast = 32.0;  // yarn: rotations where extrapolation ends
  double beta_slow = 1.0;   // yarn: rotations where interpolation starts
  // Multiplies cos and sin, so the rotated slices of q and k, and their dot product by its
  // square (yarn's "attention factor"; 1 elsewhere).
  double attention_factor = 1.0;
  // DeepSeek's yarn: mscale_all_dim, which multiplies the whole softmax scale by
  // mscale(factor, mscale_all_dim)² (score_factor()); 0 elsewhere (a factor of 1).
  double score_mscale = 0.0;

  // The frequency of pair i (0 ≤ i < width/2) of a width-w rotated slice with base θ.
  double frequency(int64_t pair, int64_t width, double theta) const;
  double score_factor() const;
  // Throws SpecError("rope_scaling.<field>") for a value that cannot be.
  void validate() const;
  bool operator==(const RopeScaling&) const = default;
};

// yarn's magnitude correction 0.1·mscale·ln(factor) + 1 (1 for factor ≤ 1).
double yarn_mscale(double factor, double mscale);

std::string_view rope_scaling_kind_name(RopeScalingKind kind);  // none | linear | llama3 | yarn
// Throws SpecError("rope_scaling.type") listing the known names.
RopeScalingKind parse_rope_scaling_kind(std::string_view text);

}  // namespace kvlab
