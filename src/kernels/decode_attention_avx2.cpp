// AVX2 + FMA + F16C decode attention (built with -mavx2 -mfma -mf16c, chosen at run time): the
// block kernel of decode_attention_simd.inc on 8-lane vectors.
// History of this kernel (gqa:8, 16k tokens, H 32 × d_h 128, bf16, 2 threads):
// v1: items of (sequence, group, chunk), 32-token blocks, scalar exp: 20% of bandwidth,
//     compute-bound on strided per-group reads.
// v2: items of (sequence, chunk) walk whole token rows (all groups, contiguous); blocks of
//     16 tokens scored 8 rows at a time, vector exp, one softmax rescale and one accumulator
//     load/store per block and head: 36% (gqa:8, 16k, bf16, 2 threads).
// v3: four independent FMA chains in the accumulation, the next block prefetched, and each
//     group's slice converted to f32 just before use so it stays in L1: 44% — still
//     compute-bound (one thread reaches 47% of its own bandwidth).
// Tried and dropped (v4): scoring 2 rows × up to 4 heads per pass and accumulating all heads
// of a group per loaded value row (fewer loads per FMA) measured 4–9% slower than v3 (gqa:8
// and one-stream G 8, 16k, bf16, 1 and 2 threads, same harness): the per-accumulator
// horizontal sums and weight broadcasts cost more than the loads they saved.
// Tried and dropped (v5, 2026-11-30): the same driver with AVX-512 primitives (16-lane
// conversion, dot and accumulate, masked tails; this machine has AVX-512 F/BW/VL/BF16)
// measured the same as v3 (gqa:8 16k bf16 2 threads: 7.67 vs 7.67 ms; gva:8,dr=16 6.33 vs
// 6.28), so the kernel is not limited by vector instruction throughput. With the cache hot
// (2k tokens, 8 MB) it reaches only 11.4 GB/s, and perf puts ~23% of its cycles on the
// software prefetches stalling; yet dropping the prefetches, or prefetching 2, 4 or 8 blocks
// ahead, changed nothing (7.0–7.5 ms). The limit looks like per-core memory-level
// parallelism while the core is busy computing, not arithmetic. Spreading the next block's
// prefetches over its heads (a few lines per head, so the fill buffers stay busy during
// compute), 1, 2 or 4 blocks ahead, to L1 or L2: 7.3–8.1 ms against 7.7–8.1 — within noise.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

namespace kvlab {
namespace {

#define KVLAB_SIMD_LANES 8
#include "kernels/decode_attention_simd.inc"

}  // namespace

void decode_attention_avx2(const DecodeParams& p, ThreadPool& pool, DecodeWorkspace& work,
                           const std::vector<float>& rope_table) {
  decode_with_simd(p, pool, work, rope_table.data(), false);
}

}  // namespace kvlab
