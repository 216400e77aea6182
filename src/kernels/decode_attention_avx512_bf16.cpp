// AVX-512 BF16 decode attention: the AVX-512 kernel with AttnPrecision::kBf16's score and value
// passes (decode_attention_bf16_passes.inc), chosen at run time for bf16 precision where the CPU
// has AVX-512 BF16 (Zen4, Sapphire Rapids and later). Its own file: its flags let the compiler
// use vdpbf16ps, which the plain AVX-512 build must not assume.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/page_layout.h"

namespace kvlab {
namespace {

#define KVLAB_SIMD_LANES 16
#define KVLAB_SIMD_BF16 1
#include "kernels/decode_attention_simd.inc"

}  // namespace

void decode_attention_avx512_bf16(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                                  const float* rope_table) {
  decode_with_simd(p, pool, work, rope_table);
}

}  // namespace kvlab
