#pragma once

#include <torch/torch.h>

namespace kvlab::nn {

// softmax(q·kᵀ·scale, causal)·v over grouped heads, for training and full forwards:
// q [B, T, H, d_k], k [B, T, G, d_k], v [B, T, G, d_v] -> [B, T, H, d_v]; head h reads group
// h / (H / G). Keys and queries are the same positions (query i sees keys 0..i).

// The fused kernel (kernels/causal_attention) as an autograd function: one pass over each
// row's scores, no mask tensor, the masked half never computed, softmax and its backward
// inside; it keeps the probabilities [B, H, T, T] for the backward. f32 and f64 on the CPU.
torch::Tensor fused_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, double scale);

// The forward alone, for inference (prefill, no gradient): q [B, T, H, d_k] at positions Tk − T ..
// Tk − 1 over k [B, Tk, G, d_k], v [B, Tk, G, d_v] (Tk = T: a whole prompt; Tk > T: a chunk after
// cached keys); query i sees keys 0..Tk − T + i. Keeps no [B, H, T, Tk] probabilities. Throws
// std::invalid_argument where a gradient would be needed.
torch::Tensor fused_causal_attention_after(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, double scale);

// Whether fused_causal_attention takes these tensors (dtype, device).
bool fused_causal_attention_supports(const torch::Tensor& q);

// The same from libtorch's composed ops (matmul, masked softmax, matmul): the reference twin
// both fused functions are tested against (keys may start before the queries, as in
// fused_causal_attention_after).
torch::Tensor composed_causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, double scale);

}  // namespace kvlab::nn
