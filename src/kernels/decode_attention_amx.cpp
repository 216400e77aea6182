// AVX-512 (F, BW, VL, DQ) with AMX (tile, bf16) decode attention, chosen at run time where the
// CPU has them and the kernel has the permission (Sapphire Rapids and later): the 16-lane kernel
// of decode_attention_simd.inc with the tile scores of decode_attention_amx_tiles.inc for bf16
// caches. Its own file: only it is built with the AMX flags.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/amx_tiles.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "kernels/page_layout.h"

namespace kvlab {
namespace {

#define KVLAB_SIMD_LANES 16
#define KVLAB_SIMD_AMX 1
#include "kernels/decode_attention_simd.inc"

}  // namespace

void decode_attention_amx(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                          const float* rope_table) {
  decode_with_simd(p, pool, work, rope_table);
}

}  // namespace kvlab
