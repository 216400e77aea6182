#include "kernels/rope.h"

#include <cmath>

namespace kvlab {

double rope_frequency(int64_t pair, int64_t width, double theta) {
  return std::pow(theta, -2.0 * static_cast<double>(pair) / static_cast<double>(width));
}

void rope_row(int64_t position, int64_t width, double theta, float* row) {
  const int64_t half = width / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * rope_frequency(i, width, theta);
    row[i] = static_cast<float>(std::cos(angle));
    row[half + i] = static_cast<float>(std::sin(angle));
  }
}

}  // namespace kvlab
