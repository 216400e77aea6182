#include "kernels/linear_attention_step.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace kvlab {

void validate_linear_step(const LinearStepParams& p) {
  auto require = [](bool ok, const char* field, const char* rule) {
    if (!ok) throw std::invalid_argument(std::string("linear step: ") + field + ": " + rule);
  };
  require(p.z != nullptr && p.state != nullptr && p.out != nullptr, "z/state/out", "must be set");
  require(p.n_seqs >= 0 && p.n_heads > 0 && p.head_dim > 0, "n_seqs/n_heads/head_dim", "> 0");
}

void linear_step_reference(const LinearStepParams& p) {
  validate_linear_step(p);
  const int64_t d = p.head_dim, per_head = d * d + d;
  for (int64_t item = 0; item < p.n_seqs * p.n_heads; ++item) {
    const float* z = p.z + item * d;
    float* S = p.state + item * per_head;
    float* s = S + d * d;
    double denominator = 0;
    for (int64_t i = 0; i < d; ++i) {
      const float phi = z[i] > 0 ? z[i] + 1.0f : std::exp(z[i]);
      for (int64_t j = 0; j < d; ++j) S[i * d + j] += phi * z[j];
      s[i] += phi;
      denominator += static_cast<double>(phi) * s[i];
    }
    for (int64_t j = 0; j < d; ++j) {
      double numerator = 0;
      for (int64_t i = 0; i < d; ++i) {
        const float phi = z[i] > 0 ? z[i] + 1.0f : std::exp(z[i]);
        numerator += static_cast<double>(phi) * S[i * d + j];
      }
      p.out[item * d + j] = static_cast<float>(numerator / denominator);
    }
  }
}

}  // namespace kvlab
