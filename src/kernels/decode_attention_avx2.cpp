// AVX2 + FMA + F16C decode attention (built with -mavx2 -mfma -mf16c, chosen at run time): the
// block kernel of decode_attention_simd.inc on 8-lane vectors.
// (The kernel's history, measurements and dropped attempts: docs/kernels/decode-attention.md.)
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

#define KVLAB_SIMD_LANES 8
#include "kernels/decode_attention_simd.inc"

}  // namespace

void decode_attention_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                           const float* rope_table) {
  decode_with_simd(p, pool, work, rope_table);
}

}  // namespace kvlab
