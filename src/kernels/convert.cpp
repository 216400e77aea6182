#include "kernels/convert.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvlab {
namespace {

constexpr int64_t kBlock = kQuantBlockElements;
constexpr float kE4m3Max = 448.0f;

// A block's f32 values, zero past the row's end; true when one of them is NaN.
bool block_values(const float* row, int64_t width, int64_t b, float* block) {
  bool nan = false;
  for (int64_t i = 0; i < kBlock; ++i) {
    const int64_t at = b * kBlock + i;
    block[i] = at < width ? row[at] : 0.0f;
    nan |= std::isnan(block[i]);
  }
  return nan;
}

// std::lround (halves away from zero) without the library call, which dominated a q8_0 store:
// the truncation and its remainder are exact in f32. Values it cannot cast go to std::lround.
int8_t round_to_quant(float v) {
  if (!(std::fabs(v) < 256.0f)) return static_cast<int8_t>(std::lround(v));
  const int whole = static_cast<int>(v);
  const float rest = v - static_cast<float>(whole);
  return static_cast<int8_t>(whole + (rest >= 0.5f ? 1 : rest <= -0.5f ? -1 : 0));
}

void store_q8_0(const float* row, int64_t width, std::byte* out) {
  float x[kBlock];
  for (int64_t b = 0; b * kBlock < width; ++b, out += 2 + kBlock) {
    const bool nan = block_values(row, width, b, x);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float d = nan ? NAN : amax / 127.0f;
    const float inverse = d > 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d_bits = f32_to_f16(d);
    std::memcpy(out, &d_bits, 2);
    for (int64_t i = 0; i < kBlock; ++i) {
      const int8_t q = nan ? 0 : round_to_quant(x[i] * inverse);
      std::memcpy(out + 2 + i, &q, 1);
    }
  }
}

void store_q4_0(const float* row, int64_t width, std::byte* out) {
  float x[kBlock];
  for (int64_t b = 0; b * kBlock < width; ++b, out += 2 + kBlock / 2) {
    const bool nan = block_values(row, width, b, x);
    float amax = 0.0f, max = 0.0f;  // max: the value of largest magnitude, with its sign
    for (float v : x) {
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        max = v;
      }
    }
    // d = max / −8 maps the largest magnitude to q = 0 exactly and the rest into 0..15
    const float d = nan ? NAN : max / -8.0f;
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d_bits = f32_to_f16(d);
    std::memcpy(out, &d_bits, 2);
    uint8_t q[kBlock];
    for (int64_t i = 0; i < kBlock; ++i) {
      q[i] = nan ? 8 : static_cast<uint8_t>(std::min(15, static_cast<int>(x[i] * inverse + 8.5f)));
    }
    for (int64_t i = 0; i < kBlock / 2; ++i) {
      out[2 + i] = static_cast<std::byte>(q[i] | (q[i + kBlock / 2] << 4));
    }
  }
}

void store_fp8(const float* row, int64_t width, std::byte* out) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < width; ++i) {
    amax = std::max(amax, std::fabs(row[i]));
    nan |= std::isnan(row[i]);
  }
  const float scale = nan ? NAN : amax / kE4m3Max;
  std::memcpy(out, &scale, 4);
  const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < width; ++i) {
    out[4 + i] = static_cast<std::byte>(nan ? 0 : f32_to_e4m3(row[i] * inverse));
  }
}

void load_q8_0(const std::byte* in, int64_t width, float* row) {
  for (int64_t b = 0; b * kBlock < width; ++b, in += 2 + kBlock) {
    uint16_t d_bits;
    std::memcpy(&d_bits, in, 2);
    const float d = f16_to_f32(d_bits);
    for (int64_t i = 0; i < kBlock && b * kBlock + i < width; ++i) {
      row[b * kBlock + i] = static_cast<float>(static_cast<int8_t>(in[2 + i])) * d;
    }
  }
}

void load_q4_0(const std::byte* in, int64_t width, float* row) {
  for (int64_t b = 0; b * kBlock < width; ++b, in += 2 + kBlock / 2) {
    uint16_t d_bits;
    std::memcpy(&d_bits, in, 2);
    const float d = f16_to_f32(d_bits);
    for (int64_t i = 0; i < kBlock; ++i) {
      const int64_t at = b * kBlock + i;
      if (at >= width) break;
      const uint8_t byte = static_cast<uint8_t>(in[2 + i % (kBlock / 2)]);
      const int q = i < kBlock / 2 ? (byte & 0x0F) : (byte >> 4);
      row[at] = static_cast<float>(q - 8) * d;
    }
  }
}

void load_fp8(const std::byte* in, int64_t width, float* row) {
  float scale;
  std::memcpy(&scale, in, 4);
  for (int64_t i = 0; i < width; ++i) {
    row[i] = e4m3_to_f32(static_cast<uint8_t>(in[4 + i])) * scale;
  }
}

}  // namespace

float e4m3_to_f32(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0x0F, mantissa = bits & 0x07;
  if (exponent == 0x0F && mantissa == 0x07) return NAN;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float a = std::min(std::fabs(value), kE4m3Max);
  if (a < std::ldexp(1.0f, -6)) {  // subnormal steps of 2^-9; 8 steps is the smallest normal
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int k;
  const float fraction = std::frexp(a, &k);  // a = fraction · 2^k, fraction in [0.5, 1)
  int exponent = k - 1 + 7;
  int mantissa = static_cast<int>(std::nearbyint((2.0f * fraction - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int code = std::min(0x7E, (exponent << 3) | mantissa);  // 0x7E = 448
  return sign | static_cast<uint8_t>(code);
}

void store_rows(const float* values, int64_t n_rows, int64_t width, DType dtype, void* dst) {
  auto* out = static_cast<std::byte*>(dst);
  const int64_t stride = row_bytes(dtype, width);
  for (int64_t r = 0; r < n_rows; ++r, values += width, out += stride) {
    switch (dtype) {
      case DType::kF32:
        std::memcpy(out, values, static_cast<size_t>(width) * sizeof(float));
        break;
      case DType::kBf16:
        for (int64_t i = 0; i < width; ++i) {
          const uint16_t bits = f32_to_bf16(values[i]);
          std::memcpy(out + 2 * i, &bits, 2);
        }
        break;
      case DType::kF16:
        for (int64_t i = 0; i < width; ++i) {
          const uint16_t bits = f32_to_f16(values[i]);
          std::memcpy(out + 2 * i, &bits, 2);
        }
        break;
      case DType::kQ8_0:
        store_q8_0(values, width, out);
        break;
      case DType::kQ4_0:
        store_q4_0(values, width, out);
        break;
      case DType::kFp8:
        store_fp8(values, width, out);
        break;
    }
  }
}

void load_rows(const void* src, int64_t n_rows, int64_t width, DType dtype, float* out) {
  const auto* in = static_cast<const std::byte*>(src);
  const int64_t stride = row_bytes(dtype, width);
  for (int64_t r = 0; r < n_rows; ++r, in += stride, out += width) {
    switch (dtype) {
      case DType::kF32:
      case DType::kBf16:
      case DType::kF16:
        for (int64_t i = 0; i < width; ++i) out[i] = load_element(in, dtype, i);
        break;
      case DType::kQ8_0:
        load_q8_0(in, width, out);
        break;
      case DType::kQ4_0:
        load_q4_0(in, width, out);
        break;
      case DType::kFp8:
        load_fp8(in, width, out);
        break;
    }
  }
}

}  // namespace kvlab
