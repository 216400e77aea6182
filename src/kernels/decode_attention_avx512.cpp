// AVX-512 (F, BW, VL, DQ) decode attention, chosen at run time where the CPU has it: the block
// kernel of decode_attention_simd.inc on 16-lane vectors. Twice the lanes per instruction and
// 32 vector registers; the scalar-ish helpers (exp, RoPE on read, dr=0 rebuild) stay AVX2.
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
#include "kernels/decode_attention_simd.inc"

}  // namespace

void decode_attention_avx512(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                             const float* rope_table) {
  decode_with_simd(p, pool, work, rope_table);
}

}  // namespace kvlab
