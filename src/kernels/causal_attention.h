#pragma once

#include <algorithm>
#include <cstdint>

namespace kvlab {

// Causal softmax attention over grouped heads for training, read and written in the layout the
// projections produce (no transposes): q [B, T, H, d_k], k [B, T, G, d_k], v [B, T, G, d_v],
// out [B, T, H, d_v], probabilities [B, H, T, T] (row i holds keys 0..i, zeros after them up
// to the end of its query block; the rest is never written nor read). Head h reads group
// h / (H / G). Query i attends to keys 0..i only. f32 computes by blocks of kCausalQueryBlock
// query rows, each product one oneDNN sgemm over the keys up to the block's last row (so about
// half of the masked half is never computed); f64 row by row in plain loops. The reference
// twin is nn's composed path (matmul, masked softmax, matmul), which the tests hold these to.

// Query rows per block of the f32 path's products.
constexpr int64_t kCausalQueryBlock = 64;

// key_offset: keys cached before the first query (a prompt chunk after key_offset tokens): k and v
// hold key_offset + tokens rows, query i attends to keys 0..key_offset + i, and probabilities are
// [B, H, tokens, key_offset + tokens]. The forward only; the backward takes key_offset 0.
// keep_probs false (inference): the forward writes each item's probabilities into an item-local
// buffer of item_probs() elements instead of the [B, H, tokens, keys] tensor a backward reads.
struct CausalAttentionShape {
  int64_t batch = 0, tokens = 0, heads = 0, groups = 0, key_dim = 0, value_dim = 0;
  int64_t key_offset = 0;
  bool keep_probs = true;

  int64_t keys() const { return key_offset + tokens; }
  int64_t forward_scratch() const { return key_dim * keys(); }
  int64_t item_probs() const { return kCausalQueryBlock * keys(); }
  int64_t backward_scratch() const { return std::max(value_dim + 2, kCausalQueryBlock) * tokens; }
};

// One (batch, head) item: its probabilities and output rows. `scratch` holds
// forward_scratch() elements (the f64 path's; the f32 path needs none).
void causal_attention_forward(const CausalAttentionShape& s, int64_t b, int64_t h, double scale,
                              const float* q, const float* k, const float* v, float* out,
                              float* probs, float* scratch);
void causal_attention_forward(const CausalAttentionShape& s, int64_t b, int64_t h, double scale,
                              const double* q, const double* k, const double* v, double* out,
                              double* probs, double* scratch);

// One (batch, group) item of the backward: dq of the group's heads, and dk, dv of the group
// (overwritten: each group's rows belong to one item). `scratch` holds backward_scratch()
// elements.
void causal_attention_backward(const CausalAttentionShape& s, int64_t b, int64_t g, double scale,
                               const float* q, const float* k, const float* v, const float* probs,
                               const float* dout, float* dq, float* dk, float* dv, float* scratch);
void causal_attention_backward(const CausalAttentionShape& s, int64_t b, int64_t g, double scale,
                               const double* q, const double* k, const double* v,
                               const double* probs, const double* dout, double* dq, double* dk,
                               double* dv, double* scratch);

}  // namespace kvlab
