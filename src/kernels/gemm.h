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

// The same product from bf16 operands (raw bf16 bits, e.g. rounded from f32 to nearest even)
// with f32 sums and an f32 C, alpha 1 and beta 0 or 1: oneDNN's matmul (its brgemm kernels
// with vdpbf16ps, or AMX tiles). The primitive is created per call: oneDNN's primitive cache
// makes a repeated shape cost ~2 µs, the first one a JIT compile (0.3–15 ms). Throws
// std::runtime_error naming the problem for another beta or when oneDNN refuses.
void gemm_bf16(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX), where gemm_bf16 is about
// twice sgemm's rate; elsewhere oneDNN emulates it or refuses.
bool bf16_gemm_native();

// What computes the products on this CPU, for benchmark headers: oneDNN's version and the
// widest instruction set it dispatches to, e.g. "oneDNN 2.6.3 (avx512_core_bf16)".
std::string gemm_description();

}  // namespace kvlab
