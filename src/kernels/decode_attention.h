#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/page_layout.h"
#include "spec/dtype.h"
#include "spec/rope_scaling.h"

namespace kvlab {

// The arithmetic of the score and value passes.
//  kF32: exact to f32 accumulation (queries, cached elements and weights as f32; the reference
//        for every test).
//  kBf16: as FlashAttention and llama.cpp do it: queries rounded to bf16, scores by bf16 dot
//        products with f32 sums, softmax in f32, each weight exp(s_j - m) rounded to bf16
//        (m: the running maximum of the work item at the end of the token's block), values
//        summed by bf16 products in f32. Keys rotated on read are rounded to bf16 after the
//        norm and rotation. It applies to bf16 caches without rebuilt keys (gva dr=0); elsewhere
//        a call computes in f32 (see effective_precision).
//  kInt8: as llama.cpp scores quantized caches: each query head row rounded to q8_0 (blocks of
//        32 int8 with an f16 scale), scores as integer dot products of blocks times both scales,
//        summed in f32; the rope slice, softmax and the value pass (values dequantized) in f32.
//        It applies to q8_0 and q4_0 caches whose keys are cached rows (not rotated or rebuilt
//        on read).
enum class AttnPrecision { kF32, kBf16, kInt8 };

// Tokens a work item covers (items start at multiples of it) and tokens per softmax block: with
// kBf16 the weights are rounded relative to the running maximum, so the blocks are part of the
// result, and the reference follows them.
constexpr int64_t kDecodeChunkTokens = 512;
constexpr int64_t kDecodeBlockTokens = 16;

// A CSR page table over n_seqs sequences, as plain pointers (FlashInfer's layout).
struct PageTableView {
  const int32_t* indptr = nullptr;         // [n_seqs + 1]
  const int32_t* page_ids = nullptr;       // [indptr[n_seqs]]
  const int32_t* last_page_len = nullptr;  // [n_seqs]
  int32_t page_size = 0;
};

// One decode step of attention for a batch of sequences, over a paged cache. Both kernel
// shapes of DESIGN.md are this one call:
//  two-stream: key_pool = K, value_pool = V;
//  one-stream: key_pool == value_pool = C (each cached row read once, used as key and value),
//              plus an optional rope stream shared by all heads (gva, mla), and optionally
//              K = RoPE(RMSNorm(C)) computed on read (the shared K=V + RoPE layout).
// Scores: (q_h · k_{g(h),j} + q_rope_h · r_j) · scale, softmax over j in f32, output
// Σ_j p_j v_{g(h),j}. Head h uses group h / (n_heads / n_groups). Queries arrive already
// rotated (and absorbed: q̃ for gva and mla). With key_maps (gva dr=0) the one stream holds
// value rows only and keys are rebuilt per head and position (see key_maps).
struct DecodeParams {
  const float* q = nullptr;       // [n_seqs, n_heads, key_width]
  const float* q_rope = nullptr;  // [n_seqs, n_heads, rope_width], or nullptr
  // pools of head rows in `dtype` (row_bytes each), a page's rows of a group consecutive
  // (kernels/page_layout.h)
  const std::byte* key_pool = nullptr;    // [page][n_groups][page_size][key_width]
  const std::byte* value_pool = nullptr;  // [page][n_groups][page_size][value_width]
  const std::byte* rope_pool = nullptr;   // [page][page_size][rope_width], or nullptr
  // the key pool's order inside a page's group (page_layout.h); kTokenPairs: bf16 two-stream
  // caches without a rope stream, pages a whole number of blocks (kDecodeBlockTokens), even
  // key_width
  KeyOrder key_order = KeyOrder::kRows;
  PageTableView pages;
  int64_t n_seqs = 0;
  int64_t n_heads = 0;
  int64_t n_groups = 0;
  int64_t key_width = 0;
  int64_t value_width = 0;
  int64_t rope_width = 0;
  DType dtype = DType::kF32;
  // the rope pool's dtype when it is not `dtype` (only under q8_0/q4_0/fp8 caches, where the
  // rope stream may stay bf16)
  std::optional<DType> rope_dtype;
  float scale = 1.0f;
  // one-stream with RoPE on read: cached row j becomes RoPE_j(RMSNorm(c_j)) as a key
  bool rope_on_read = false;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  const float* norm_weight = nullptr;  // [key_width]: RMS-normalise keys on read, or nullptr
  float norm_eps = 1e-5f;
  // gva with dr=0 (needs rope_on_read): there is no key row to read. Each head rebuilds its
  // key from the cached value row, k_{h,j} = RoPE_j(v_{g(h),j} M_h), k[n] = Σ_d v[d] M_h[d][n]:
  // d_h · d_n multiply-adds per head and position, the cost the seed warns about.
  const float* key_maps = nullptr;  // [n_heads][value_width][key_width], or nullptr
  float* out = nullptr;             // [n_seqs, n_heads, value_width]
  AttnPrecision precision = AttnPrecision::kF32;
};

// The rope pool's dtype: rope_dtype, or dtype when unset.
inline DType rope_pool_dtype(const DecodeParams& params) {
  return params.rope_dtype.value_or(params.dtype);
}
// The precision a call computes in: params.precision where it applies, else kF32.
AttnPrecision effective_precision(const DecodeParams& params);
const char* attn_precision_name(AttnPrecision precision);
// "f32", "bf16" or "int8"; throws std::invalid_argument naming `field` otherwise.
AttnPrecision parse_attn_precision(const std::string& text, const char* field);

// The plain scalar reference: every fast kernel is tested against it. Throws
// std::invalid_argument naming the field for inconsistent parameters.
void decode_attention_reference(const DecodeParams& params);
void validate_decode_params(const DecodeParams& params);

}  // namespace kvlab
