#pragma once

#include <cstdint>

namespace kvlab::infer {

// Temperatures below this sample greedily: softmax(l / T) tends to the argmax as T → 0, and
// from here on the division stays finite for every float logit (|l| / 1e-5 < 4e43), where
// l / 1e-320 is infinite and the softmax NaN. vLLM draws the same line (its _SAMPLING_EPS).
inline constexpr double kGreedyBelowTemperature = 1e-5;

struct SamplingOptions {
  double temperature = 0.0;  // below kGreedyBelowTemperature (0 included): greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
};

}  // namespace kvlab::infer
