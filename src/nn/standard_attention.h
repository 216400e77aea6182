#pragma once

#include "nn/attention.h"
#include "nn/layers.h"

namespace kvlab::nn {

// mha, gqa:G, mqa and the projection-sharing family: qk-v (Q=K≠V), q-kv (Q≠K=V), qkv1
// (Q=K=V), q-gqa:G, q-mqa, and the non-causal "+" forms. A shared projection is one
// parameter used twice (its gradient is the sum of both uses), never two tensors kept equal.
// With RoPE and a shared K=V stream the cache holds the unrotated C: K = RoPE(C) or
// RoPE(RMSNorm(C)) with knorm, V = C.
class StandardAttentionImpl : public AttentionImpl {
 public:
  StandardAttentionImpl(const AttentionSpec& spec, const torch::TensorOptions& options);

  torch::Tensor forward(const torch::Tensor& x, int64_t start_pos = 0) override;
  std::vector<torch::Tensor> cache_rows(const torch::Tensor& x, int64_t start_pos = 0) override;
  torch::Tensor forward_from_cache(const torch::Tensor& x, const std::vector<torch::Tensor>& rows,
                                   int64_t start_pos) override;
  DecodeQuery decode_query(const torch::Tensor& x, int64_t start_pos) override;
  torch::Tensor decode_output(const torch::Tensor& attended) override;

  // Pre-softmax scores [B, H, T, T] of the explicit form ("+" bias included).
  torch::Tensor scores(const torch::Tensor& x);
  ProjectionWeights projection_weights() const override;

  // Which projection produces what; names follow Hugging Face where one exists.
  Linear q_proj{nullptr};        // mha, gqa, mqa, q-kv, q-gqa, q-mqa: D -> H·d
  Linear k_proj{nullptr};        // mha, gqa, mqa: D -> G·d
  Linear v_proj{nullptr};        // mha, gqa, mqa, qk-v: D -> G·d
  Linear qk_proj{nullptr};       // qk-v: D -> H·d, used as query and key
  Linear kv_proj{nullptr};       // q-kv, q-gqa, q-mqa: D -> G·d, used as key and value
  Linear qkv_proj{nullptr};      // qkv1: D -> H·d, used as query, key and value
  Linear o_proj{nullptr};        // H·d -> D
  Norm k_norm{nullptr};          // knorm: RMSNorm over d on the key side of C; qknorm: on k
  Norm q_norm{nullptr};          // qknorm: RMSNorm over d on each query head, before RoPE
  torch::Tensor pos_mix_weight;  // "+": [H, m], the 1×1 conv over the 2-D positional channels
  torch::Tensor pos_mix_bias;    // "+": [H]

 private:
  struct Streams {
    torch::Tensor q;  // [B, T, H, d], rotated when the spec uses RoPE
    torch::Tensor k;  // [B, T, G, d], rotated
    torch::Tensor v;  // [B, T, G, d]
  };
  torch::Tensor project_query(const torch::Tensor& x);  // [B, T, H, d], unrotated
  Streams project(const torch::Tensor& x, int64_t start_pos);
  // Turns the shared content rows C into keys the way the decode kernel does on read.
  torch::Tensor keys_from_content(const torch::Tensor& content, int64_t start_pos);
  // mask_offset: position of the first query minus that of the first key
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       int64_t mask_offset);
  bool is_plus() const;
};

}  // namespace kvlab::nn
