// The decode step of mla: W_uk folded into the query, W_uv applied to the weighted sum of latent
// rows; the latent c and the shared rope key cached.
#include <algorithm>

#include "infer/attention_step.h"
#include "infer/decode_attention.h"
#include "infer/weight_copy.h"
#include "nn/mla_attention.h"

namespace kvlab::infer {
namespace {

class MlaDecode final : public DecodeAttention {
 public:
  MlaDecode(nn::MlaAttentionImpl& m, DType weight_dtype) : spec_(m.spec()) {
    query_ = dense_weights(m.q_proj ? m.q_proj : m.q_b_proj, weight_dtype);
    query_down_ = dense_weights(m.q_a_proj, weight_dtype);
    query_down_norm_ = norm_weights(m.q_a_layernorm);
    latent_ = dense_weights(m.kv_a_proj_with_mqa, weight_dtype);  // d_c + d_r
    latent_norm_ = norm_weights(m.kv_a_layernorm);                // empty with plainlatent
    up_ = absorbed_up_projections(*m.kv_b_proj, spec_);
    output_ = dense_weights(m.o_proj, weight_dtype);
  }

  const AttentionSpec& spec() const override { return spec_; }

  int64_t weight_bytes() const override {
    return query_.bytes() + query_down_.bytes() + latent_.bytes() + output_.bytes() +
           query_down_norm_.bytes() + latent_norm_.bytes() + up_.bytes();
  }

  ScratchWidths scratch_widths() const override {
    const AttentionSpec& s = spec_;
    ScratchWidths w;
    w.proj_a = query_.out;
    w.proj_b = std::max(latent_.out, query_down_.out);
    w.proj_c = s.latent_dim;
    w.query = w.attended = s.n_heads * s.latent_dim;
    w.query_rope = s.n_heads * s.rope_dim;
    w.expanded = s.n_heads * s.value_dim;
    w.rope = s.rope_dim;
    return w;
  }

  void run(AttentionStep& step, int64_t layer, const float* x, float* y, int64_t n) const override {
    const AttentionSpec& s = spec_;
    const int64_t D = step.d_model(), H = s.n_heads;
    DecodeParams p = step.kernel_params(s, layer);
    const int64_t dn = s.nope_dim, dr = s.rope_dim, dc = s.latent_dim, dv = s.value_dim;
    const int64_t q_width = dn + dr;
    if (!query_down_.empty()) {
      const int64_t dq = query_down_.out;
      step.dense(query_down_, x, D, step.proj_b.data(), dq, n);
      step.for_rows(n, dq, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
          float* row = step.proj_b.data() + b * dq;
          apply_norm(query_down_norm_, row, row);
        }
      });
      step.dense(query_, step.proj_b.data(), dq, step.proj_a.data(), H * q_width, n);
      step.dense(latent_, x, D, step.proj_b.data(), dc + dr, n);  // [n, d_c + d_r]
    } else {  // the queries [n, H, d_n + d_r] and the latent rows, from one read of x
      const AttentionStep::DenseOutput outputs[] = {{&query_, step.proj_a.data(), H * q_width},
                                                    {&latent_, step.proj_b.data(), dc + dr}};
      step.dense(outputs, x, D, n);
    }
    // q̃_h = W_uk,hᵀ q_h^nope: [d_c][d_n] · [d_n]
    step.per_head(up_.key_up_t.data(), nullptr, dc, dn, step.proj_a.data(), q_width,
                  step.query.data(), n, H);
    // per sequence: the queries' RoPE parts rotated, c normed, the rope key rotated, both cached
    const int64_t rope_stream = step.cache().stream(StreamRole::kRope);
    step.for_rows(n, H * dr + 2 * (dc + dr), [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          float* q = step.proj_a.data() + (b * H + h) * q_width;
          step.rotate(q + dn, dr, b, s);
          std::copy(q + dn, q + q_width, step.query_rope.data() + (b * H + h) * dr);
        }
        float* row = step.proj_b.data() + b * (dc + dr);
        if (latent_norm_.empty()) {  // plainlatent
          std::copy(row, row + dc, step.proj_c.data() + b * dc);
        } else {
          apply_norm(latent_norm_, row, step.proj_c.data() + b * dc);  // c: [n, d_c]
        }
        step.rotate(row + dc, dr, b, s);
        // the rope key sits after c in the projection's row: stored on its own
        step.cache().store_token(layer, rope_stream, step.seq(b), step.pos(b), row + dc);
      }
      step.store_rows(layer, StreamRole::kContent, step.proj_c.data(), dc, first, last);
    });
    p.q_rope = step.query_rope.data();
    step.run_attention_kernel(p);  // attended: [n, H, d_c]
    // v_h = W_uv,h (Σ p c) + b_v,h
    step.expand_values(up_, dv, dc, dc, n, H);
    step.dense(output_, step.expanded.data(), H * dv, y, D, n);
  }

 private:
  AttentionSpec spec_;
  // query (q_proj or q_b_proj), query_down (q_a_proj) + its norm, latent (kv_a_proj_with_mqa)
  DenseWeights query_, query_down_, latent_, output_;
  NormWeights query_down_norm_, latent_norm_;
  AbsorbedUpProjections up_;
};

}  // namespace

std::unique_ptr<DecodeAttention> load_mla_decode(nn::AttentionImpl& module, DType weight_dtype) {
  return std::make_unique<MlaDecode>(module_of<nn::MlaAttentionImpl>(module), weight_dtype);
}

}  // namespace kvlab::infer
