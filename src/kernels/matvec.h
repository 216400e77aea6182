#pragma once

#include <cstdint>

#include "kernels/thread_pool.h"

namespace kvlab {

// The dense layers of a decode step: y_b = W x_b (+ bias) for a small batch of rows x_b, with
// W stored [out][in] row-major (torch's Linear layout), every operand f32. At batch sizes of
// decode this is a matrix-vector product bound by reading W: each weight row is read once
// for the whole batch.
struct MatVecParams {
  const float* weight = nullptr;  // [out][in]
  const float* bias = nullptr;    // [out], or nullptr
  const float* x = nullptr;       // [n][x_stride], the first `in` of each row used
  float* y = nullptr;             // [n][y_stride], the first `out` of each row written
  int64_t n = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;  // 0: in
  int64_t y_stride = 0;  // 0: out
};

// The plain reference (dot products accumulated in double). Throws std::invalid_argument
// naming the field for inconsistent parameters.
void matvec_reference(const MatVecParams& params);
void validate_matvec(const MatVecParams& params);
// AVX2 + FMA (matvec_avx2.cpp): output rows in blocks spread over the pool, four weight rows
// per pass so each x_b load serves four dot products.
void matvec_avx2(const MatVecParams& params, ThreadPool& pool);

}  // namespace kvlab
