#pragma once

#include <cstdint>

#include "spec/rope_scaling.h"

namespace kvlab {

// RoPE as every layer of kvlab applies it (nn's modules, the decode runtime, the kernels and
// their reference): rotate-half pairing, channel i with channel i + w/2 of a width-w vector,
// turned at position p by the angle p · f_i, f_i = θ^(−2i/w) as `scaling` stretches it, and
// cos and sin multiplied by its attention factor. These two functions are its only definition.

// f_i: how far pair i turns per position.
double rope_frequency(int64_t pair, int64_t width, double theta, const RopeScaling& scaling);

// One position's row of `width` floats: a·[cos(p·f_0), …, cos(p·f_{w/2−1}) ;
// sin(p·f_0), …, sin(p·f_{w/2−1})], a = scaling.attention_factor, angles in double precision.
void rope_row(int64_t position, int64_t width, double theta, const RopeScaling& scaling,
              float* row);

// x [width] rotated in place by a rope_row (cos then sin halves).
inline void rotate_by_row(float* x, int64_t width, const float* cos_sin) {
  const int64_t half = width / 2;
  const float* cos = cos_sin;
  const float* sin = cos_sin + half;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[half + i];
    x[i] = x1 * cos[i] - x2 * sin[i];
    x[half + i] = x2 * cos[i] + x1 * sin[i];
  }
}

}  // namespace kvlab
