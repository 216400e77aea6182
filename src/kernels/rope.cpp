#include "kernels/rope.h"

#include <cmath>

namespace kvlab {

double rope_frequency(int64_t pair, int64_t width, double theta, const RopeScaling& scaling) {
  return scaling.frequency(pair, width, theta);
}

void rope_row(int64_t position, int64_t width, double theta, const RopeScaling& scaling,
              float* row) {
  const int64_t half = width / 2;
  const double a = scaling.attention_factor;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * scaling.frequency(i, width, theta);
    row[i] = static_cast<float>(a * std::cos(angle));
    row[half + i] = static_cast<float>(a * std::sin(angle));
  }
}

}  // namespace kvlab
