#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kvlab {

// e^x for x <= 0, branch-free so that a loop of it vectorises: x = n·ln 2 + r with
// |r| <= ln2/2 (n rounded to nearest), e^r by its degree-6 Taylor polynomial (relative error <
// 2e-7, about one f32 ulp), times 2^n put into the exponent bits. Below −87 it returns e^−87 (the
// smallest power whose 2^n is still a normal f32). f64 keeps std::exp.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  // n = round(x / ln 2) by adding and subtracting 1.5·2^23 (exact for |n| < 2^22): std::floor
  // is a library call the vectoriser will not take under the default -ftrapping-math
  constexpr float kRoundingShift = 12582912.0f;
  const float n = (x * 1.44269504f + kRoundingShift) - kRoundingShift;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 in two parts
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 +
                                          r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
[[gnu::always_inline]] inline double exp_nonpositive(double x) { return std::exp(x); }

}  // namespace kvlab
