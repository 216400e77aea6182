#include "kernels/gelu.h"

#include <algorithm>
#include <cmath>

#include "kernels/exp_nonpositive.h"
#include "kernels/target_clones.h"

// Branch-free element functions (selects, no calls), so that each loop vectorises under
// KVLAB_CLONES.

namespace kvlab {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // √(2/π)
constexpr float kTanhCubic = 0.044715f;
// Beyond ±20 the derivatives' x·density terms are below f32's resolution of the result; x is
// clamped there so that x times the floor of exp_nonpositive (e^−87), or a cube that overflowed,
// cannot make them count (or make inf · 0).
constexpr float kDensityTermLimit = 20.0f;

// The normal CDF Φ(x) = erfc(−x/√2)/2, and e^(−x²/2) for the density. erfc(z) for z >= 0 is
// Numerical Recipes' erfcc (a Chebyshev fit, t·e^(−z² + P(t)) with t = 1/(1 + z/2); fractional
// error < 1.2e-7 for every z), so Φ keeps its relative accuracy far into the negative tail,
// where GELU's values are tiny but not zero; for z < 0, erfc(z) = 2 − erfc(−z).
struct NormalCdf {
  float cdf;
  float gauss;  // e^(−x²/2)
};
[[gnu::always_inline]] inline NormalCdf normal_cdf(float x) {
  const float z = std::fabs(x) * kSqrtHalf;
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float p =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f +
                               t * (-1.13520398f +
                                    t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  const float gauss = exp_nonpositive(-z * z);
  const float erfc_abs = t * gauss * exp_nonpositive(p);  // erfc(|x|/√2); P(t) <= 0 here
  return {0.5f * (x >= 0.0f ? 2.0f - erfc_abs : erfc_abs), gauss};
}

// σ(2u) = (1 + tanh u)/2 for u = √(2/π)(x + 0.044715x³), with e^(−2|u|) so the exponent is
// never positive.
[[gnu::always_inline]] inline float tanh_form_gate(float u) {
  const float e = exp_nonpositive(-2.0f * std::fabs(u));
  const float r = 1.0f / (1.0f + e);
  return u >= 0.0f ? r : e * r;
}

}  // namespace

KVLAB_CLONES void gelu_forward(GeluForm form, const float* x, float* y, int64_t n) {
  if (form == GeluForm::kErf) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i]).cdf;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v * tanh_form_gate(kSqrt2OverPi * (v + kTanhCubic * v * v * v));
  }
}

KVLAB_CLONES void swiglu_forward(const float* gate, float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // g σ(g) from e = e^(−|g|), which never overflows: g / (1 + e) for g ≥ 0, g e / (1 + e)
    // below — one division either way
    const float e = exp_nonpositive(-std::fabs(g));
    up[i] *= (g >= 0.0f ? g : g * e) / (1.0f + e);
  }
}

KVLAB_CLONES void gelu_backward(GeluForm form, const float* x, const float* dy, float* dx,
                                int64_t n) {
  if (form == GeluForm::kErf) {
    // d/dx x·Φ(x) = Φ(x) + x·φ(x)
    for (int64_t i = 0; i < n; ++i) {
      const NormalCdf c = normal_cdf(x[i]);
      const float xc = std::clamp(x[i], -kDensityTermLimit, kDensityTermLimit);
      dx[i] = dy[i] * (c.cdf + xc * kInvSqrt2Pi * c.gauss);
    }
    return;
  }
  // d/dx x·σ(2u) = σ + 2x·σ(1 − σ)·u′, u′ = √(2/π)(1 + 3·0.044715x²)
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(x[i], -kDensityTermLimit, kDensityTermLimit);
    const float s = tanh_form_gate(kSqrt2OverPi * (v + kTanhCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

}  // namespace kvlab
