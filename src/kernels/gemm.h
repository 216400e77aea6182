#pragma once

#include <cstdint>
#include <string>

namespace kvlab {

// C[m, n] = alpha · op(A) · op(B) + beta · C over row-major f32 matrices, op = transpose or
// not; lda, ldb, ldc are row strides in elements. oneDNN's sgemm: kernels generated for the
// CPU it runs on (AVX-512 on Zen 4/5 and Sapphire Rapids, where Debian's OpenBLAS 0.3.21 runs
// its Haswell AVX2 kernels at about half the rate), on libtorch's OpenMP threads. Throws
// std::runtime_error naming oneDNN's status if it refuses the arguments.
void sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// What computes the products on this CPU, for benchmark headers: oneDNN's version and the
// widest instruction set it dispatches to, e.g. "oneDNN 2.6.3 sgemm (avx512_core_bf16)".
std::string gemm_description();

}  // namespace kvlab
