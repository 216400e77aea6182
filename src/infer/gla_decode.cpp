// The decode step of gla: one cached row [c_g ; k^rope_g] per latent head, scored by
// q̃_h = [W_uk,hᵀ q_h^nope ; q_h^rope]; W_uv,h maps the first d_c channels of the weighted sum.
#include <algorithm>

#include "infer/attention_step.h"
#include "infer/decode_attention.h"
#include "infer/weight_copy.h"
#include "nn/gla_attention.h"

namespace kvlab::infer {
namespace {

class GlaDecode final : public DecodeAttention {
 public:
  GlaDecode(nn::GlaAttentionImpl& m, DType weight_dtype) : spec_(m.spec()) {
    query_ = dense_weights(m.q_proj, weight_dtype);
    latent_ = dense_weights(m.kv_a_proj, weight_dtype);  // C·(d_c + d_r)
    latent_norm_ = norm_weights(m.kv_a_layernorm);
    up_ = absorbed_up_projections(*m.kv_b_proj, spec_);
    output_ = dense_weights(m.o_proj, weight_dtype);
  }

  const AttentionSpec& spec() const override { return spec_; }

  int64_t weight_bytes() const override {
    return query_.bytes() + latent_.bytes() + output_.bytes() + latent_norm_.bytes() + up_.bytes();
  }

  ScratchWidths scratch_widths() const override {
    const AttentionSpec& s = spec_;
    const int64_t row = s.latent_dim + s.rope_dim;
    ScratchWidths w;
    w.proj_a = query_.out;
    w.proj_b = w.proj_c = latent_.out;
    w.query = w.attended = s.n_heads * row;
    w.expanded = s.n_heads * std::max(s.latent_dim, s.value_dim);
    w.rope = s.rope_dim;
    return w;
  }

  void run(AttentionStep& step, int64_t layer, const float* x, float* y, int64_t n) const override {
    const AttentionSpec& s = spec_;
    const int64_t D = step.d_model(), H = s.n_heads, C = s.n_groups;
    const int64_t dn = s.nope_dim, dr = s.rope_dim, dc = s.latent_dim, dv = s.value_dim;
    const int64_t q_width = dn + dr, row = dc + dr;
    DecodeParams p = step.kernel_params(s, layer);
    // the queries [n, H, d_n + d_r] and the latent rows [n, C, d_c + d_r], from one read of x
    const AttentionStep::DenseOutput outputs[] = {{&query_, step.proj_a.data(), H * q_width},
                                                  {&latent_, step.proj_b.data(), C * row}};
    step.dense(outputs, x, D, n);
    // W_uk,hᵀ q_h^nope: [d_c][d_n] · [d_n] -> expanded [n, H, d_c]
    step.per_head(up_.key_up_t.data(), nullptr, dc, dn, step.proj_a.data(), q_width,
                  step.expanded.data(), n, H);
    // per sequence: q̃ = [W_uk,hᵀ q_h^nope ; rotated q_h^rope], the latent rows normed, their rope
    // parts rotated, and cached
    step.for_rows(n, H * row + 2 * C * row, [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          float* q = step.proj_a.data() + (b * H + h) * q_width;
          step.rotate(q + dn, dr, b, s);
          float* q_tilde = step.query.data() + (b * H + h) * row;  // [d_c + d_r]
          const float* absorbed = step.expanded.data() + (b * H + h) * dc;
          std::copy(absorbed, absorbed + dc, q_tilde);
          std::copy(q + dn, q + q_width, q_tilde + dc);
        }
      }
      for (int64_t bg = first * C; bg < last * C; ++bg) {
        float* projected = step.proj_b.data() + bg * row;
        float* cached = step.proj_c.data() + bg * row;
        apply_norm(latent_norm_, projected, cached);
        step.rotate(projected + dc, dr, bg / C, s);
        std::copy(projected + dc, projected + row, cached + dc);
      }
      step.store_rows(layer, StreamRole::kContent, step.proj_c.data(), C * row, first, last);
    });
    step.run_attention_kernel(p);  // attended: [n, H, d_c + d_r]
    // v_h = W_uv,h (Σ p c)[0:d_c] + b_v,h
    step.expand_values(up_, dv, dc, row, n, H);
    step.dense(output_, step.expanded.data(), H * dv, y, D, n);
  }

 private:
  AttentionSpec spec_;
  DenseWeights query_, latent_, output_;
  NormWeights latent_norm_;
  AbsorbedUpProjections up_;
};

}  // namespace

std::unique_ptr<DecodeAttention> load_gla_decode(nn::AttentionImpl& module, DType weight_dtype) {
  return std::make_unique<GlaDecode>(module_of<nn::GlaAttentionImpl>(module), weight_dtype);
}

}  // namespace kvlab::infer
