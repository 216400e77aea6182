#pragma once

#include <cstdint>

namespace kvlab {

// RoPE as every layer of kvlab applies it (nn's modules, the decode runtime, the kernels and
// their reference): rotate-half pairing, channel i with channel i + w/2 of a width-w vector,
// turned at position p by the angle p · θ^(−2i/w). These two functions are its only
// definition.

// θ^(−2i/w): how far pair i turns per position.
double rope_frequency(int64_t pair, int64_t width, double theta);

// One position's row of `width` floats: [cos(p·f_0), …, cos(p·f_{w/2−1}) ;
// sin(p·f_0), …, sin(p·f_{w/2−1})], angles in double precision.
void rope_row(int64_t position, int64_t width, double theta, float* row);

}  // namespace kvlab
