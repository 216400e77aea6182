#include "kernels/matvec.h"

#include <stdexcept>
#include <string>

namespace kvlab {

void validate_matvec(const MatVecParams& p) {
  auto require = [](bool ok, const char* field, const char* rule) {
    if (!ok) throw std::invalid_argument(std::string("matvec: ") + field + ": " + rule);
  };
  require(p.weight != nullptr && p.x != nullptr && p.y != nullptr, "weight/x/y", "must be set");
  require(p.n >= 0 && p.in > 0 && p.out > 0, "n/in/out", "n >= 0, in and out > 0");
  require(p.x_stride == 0 || p.x_stride >= p.in, "x_stride", "0 or >= in");
  require(p.y_stride == 0 || p.y_stride >= p.out, "y_stride", "0 or >= out");
}

void matvec_reference(const MatVecParams& p) {
  validate_matvec(p);
  const int64_t xs = p.x_stride > 0 ? p.x_stride : p.in;
  const int64_t ys = p.y_stride > 0 ? p.y_stride : p.out;
  for (int64_t b = 0; b < p.n; ++b) {
    for (int64_t o = 0; o < p.out; ++o) {
      double sum = p.bias != nullptr ? p.bias[o] : 0.0;
      for (int64_t i = 0; i < p.in; ++i) {
        sum += static_cast<double>(p.weight[o * p.in + i]) * p.x[b * xs + i];
      }
      p.y[b * ys + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace kvlab
