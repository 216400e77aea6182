// The decode step of gva and gta: one stream of value rows (the tied state for gta) and the
// shared rope key; the query absorbed, q̃_h = M_h q_h^nope (gta: [q_h^nope ; 0]).
#include <algorithm>

#include "infer/attention_step.h"
#include "infer/decode_attention.h"
#include "infer/weight_copy.h"
#include "nn/gva_attention.h"

namespace kvlab::infer {
namespace {

class GvaDecode final : public DecodeAttention {
 public:
  GvaDecode(nn::GvaAttentionImpl& g, DType weight_dtype) : spec_(g.spec()) {
    query_ = dense_weights(g.q_proj, weight_dtype);  // H·(d_n + d_r)
    value_ = dense_weights(g.v_proj, weight_dtype);  // G·d_h
    rope_key_ = dense_weights(g.r_proj, weight_dtype);
    query_norm_ = norm_weights(g.q_norm);
    key_maps_ = floats(g.key_maps);  // M [H][d_h][d_n]; empty for gta (a fixed selection)
    output_ = dense_weights(g.o_proj, weight_dtype);
  }

  const AttentionSpec& spec() const override { return spec_; }

  int64_t weight_bytes() const override {
    return query_.bytes() + value_.bytes() + rope_key_.bytes() + output_.bytes() +
           query_norm_.bytes() + float_bytes(key_maps_);
  }

  ScratchWidths scratch_widths() const override {
    const AttentionSpec& s = spec_;
    ScratchWidths w;
    w.proj_a = query_.out;
    w.proj_b = rope_key_.out;
    w.proj_c = value_.out;
    w.query = s.n_heads * std::max(s.head_dim, s.nope_dim);
    w.query_rope = s.n_heads * s.rope_dim;
    w.attended = s.n_heads * s.head_dim;
    w.rope = std::max({s.head_dim, s.nope_dim, s.rope_dim});
    return w;
  }

  void run(AttentionStep& step, int64_t layer, const float* x, float* y, int64_t n) const override {
    const AttentionSpec& s = spec_;
    const int64_t D = step.d_model(), H = s.n_heads, d = s.head_dim;
    DecodeParams p = step.kernel_params(s, layer);
    const int64_t dn = s.nope_dim, dr = s.rope_dim, q_width = dn + dr;
    // the queries [n, H, d_n + d_r], the values [n, G·d_h] and the rope key [n, d_r] (all heads';
    // none at d_r = 0), from one read of x
    const AttentionStep::DenseOutput outputs[] = {{&query_, step.proj_a.data(), H * q_width},
                                                  {&value_, step.proj_c.data(), value_.out},
                                                  {&rope_key_, step.proj_b.data(), dr}};
    step.dense(std::span(outputs, dr > 0 ? 3 : 2), x, D, n);
    // per sequence: the cache rows written (the rotated key), the queries normed and rotated
    step.for_rows(n, 2 * H * q_width + value_.out, [&](int64_t first, int64_t last) {
      step.store_rows(layer, StreamRole::kContent, step.proj_c.data(), value_.out, first, last);
      for (int64_t b = first; b < last; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          float* q = step.proj_a.data() + (b * H + h) * q_width;
          if (!query_norm_.empty()) apply_norm(query_norm_, q, q);
          if (dr > 0) {
            step.rotate(q + dn, dr, b, s);
            std::copy(q + dn, q + q_width, step.query_rope.data() + (b * H + h) * dr);
          } else {  // dr = 0: full-width RoPE, keys rebuilt in the kernel
            step.rotate(q, dn, b, s);
            std::copy(q, q + dn, step.query.data() + (b * H + h) * dn);
          }
        }
      }
      if (dr == 0) return;
      for (int64_t b = first; b < last; ++b) step.rotate(step.proj_b.data() + b * dr, dr, b, s);
      step.store_rows(layer, StreamRole::kRope, step.proj_b.data(), dr, first, last);
      if (key_maps_.empty()) {  // gta: M_h selects the first d_n channels, q̃_h = [q_h^nope ; 0]
        for (int64_t bh = first * H; bh < last * H; ++bh) {
          const float* q = step.proj_a.data() + bh * q_width;
          float* q_tilde = step.query.data() + bh * d;
          std::copy(q, q + dn, q_tilde);
          std::fill(q_tilde + dn, q_tilde + d, 0.0f);
        }
      }
    });
    if (dr > 0) {
      if (!key_maps_.empty()) {  // q̃_h = M_h q_h^nope: M_h [d_h][d_n] is a [out][in] matrix
        step.per_head(key_maps_.data(), nullptr, d, dn, step.proj_a.data(), q_width,
                      step.query.data(), n, H);
      }
      p.q_rope = step.query_rope.data();
    } else {
      p.key_maps = key_maps_.data();
    }
    step.run_attention_kernel(p);
    step.dense(output_, step.attended.data(), H * d, y, D, n);
  }

 private:
  AttentionSpec spec_;
  DenseWeights query_, value_, rope_key_, output_;
  NormWeights query_norm_;  // qnorm
  std::vector<float> key_maps_;
};

}  // namespace

std::unique_ptr<DecodeAttention> load_gva_decode(nn::AttentionImpl& module, DType weight_dtype) {
  return std::make_unique<GvaDecode>(module_of<nn::GvaAttentionImpl>(module), weight_dtype);
}

// GTA decodes as GVA: an empty key_maps pads the query instead of multiplying by M_h.
std::unique_ptr<DecodeAttention> load_gta_decode(nn::AttentionImpl& module, DType weight_dtype) {
  return load_gva_decode(module, weight_dtype);
}

}  // namespace kvlab::infer
