// The decode step of the standard family: mha, gqa, mqa, qk-v, q-kv, qkv1, q-gqa, q-mqa.
#include <algorithm>

#include "infer/attention_step.h"
#include "infer/decode_attention.h"
#include "infer/weight_copy.h"
#include "nn/standard_attention.h"

namespace kvlab::infer {
namespace {

class StandardDecode final : public DecodeAttention {
 public:
  StandardDecode(nn::StandardAttentionImpl& a, DType weight_dtype) : spec_(a.spec()) {
    if (a.pos_mix_weight.defined()) {
      throw std::invalid_argument("the '+' variants are non-causal and cannot decode");
    }
    query_ = dense_weights(a.q_proj ? a.q_proj : a.qk_proj ? a.qk_proj : a.qkv_proj, weight_dtype);
    key_ = dense_weights(a.k_proj, weight_dtype);
    value_ = dense_weights(a.v_proj, weight_dtype);
    content_ = dense_weights(a.kv_proj, weight_dtype);
    key_norm_ = norm_weights(a.k_norm);
    query_norm_ = norm_weights(a.q_norm);
    output_ = dense_weights(a.o_proj, weight_dtype);
  }

  const AttentionSpec& spec() const override { return spec_; }

  int64_t weight_bytes() const override {
    return query_.bytes() + key_.bytes() + value_.bytes() + content_.bytes() + output_.bytes() +
           key_norm_.bytes() + query_norm_.bytes();
  }

  ScratchWidths scratch_widths() const override {
    ScratchWidths w;
    w.proj_a = query_.out;
    w.proj_b = std::max(key_.out, content_.out);
    w.proj_c = value_.out;
    w.query = w.attended = spec_.n_heads * spec_.head_dim;
    w.rope = spec_.head_dim;
    return w;
  }

  void run(AttentionStep& step, int64_t layer, const float* x, float* y, int64_t n) const override {
    const AttentionSpec& s = spec_;
    const int64_t D = step.d_model(), H = s.n_heads, d = s.head_dim;
    DecodeParams p = step.kernel_params(s, layer);
    const bool rope = s.pos == PosScheme::kRope;
    // the query [n, H, d] and the cached stream(s): C (kv_proj, or the query itself for qkv1),
    // or V and K; unrotated, from one read of x
    AttentionStep::DenseOutput outputs[3] = {{&query_, step.proj_a.data(), H * d}};
    int64_t count = 1;
    if (s.shares_kv()) {
      outputs[count++] = {&content_, step.proj_b.data(), content_.out};  // skipped when empty
    } else {
      outputs[count++] = {&value_, step.proj_c.data(), value_.out};
      outputs[count++] = {&key_, step.proj_b.data(), key_.out};
    }
    step.dense(std::span(outputs, static_cast<size_t>(count)), x, D, n);
    const float* content = step.proj_a.data();
    int64_t content_width = H * d;
    if (s.shares_kv()) {
      if (!content_.empty()) {
        content = step.proj_b.data();
        content_width = content_.out;
      }
      if (step.cache().layout().norm_on_read) {
        p.norm_weight = key_norm_.weight.data();
        p.norm_eps = key_norm_.eps;
      }
    }
    // per sequence: the keys normed and rotated, the cache rows written, the queries copied,
    // normed and rotated
    const int64_t G = key_.out / d;
    step.for_rows(n, 2 * H * d + key_.out + value_.out, [&](int64_t first, int64_t last) {
      if (s.shares_kv()) {
        step.store_rows(layer, StreamRole::kContent, content, content_width, first, last);
      } else {
        step.store_rows(layer, StreamRole::kValue, step.proj_c.data(), value_.out, first, last);
        if (!key_.empty()) {
          for (int64_t b = first; b < last; ++b) {
            for (int64_t g = 0; g < G; ++g) {
              float* k = step.proj_b.data() + (b * G + g) * d;
              if (s.qk_norm) apply_norm(key_norm_, k, k);
              if (rope) step.rotate(k, d, b, s);
            }
          }
          step.store_rows(layer, StreamRole::kKey, step.proj_b.data(), key_.out, first, last);
        }
      }
      for (int64_t b = first; b < last; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          float* q = step.query.data() + (b * H + h) * d;
          const float* projected = step.proj_a.data() + (b * H + h) * d;
          std::copy(projected, projected + d, q);
          if (s.qk_norm) apply_norm(query_norm_, q, q);
          if (rope) step.rotate(q, d, b, s);
        }
      }
      if (key_.empty() && !s.shares_kv()) {  // Q = K: the rotated queries are the keys
        step.store_rows(layer, StreamRole::kKey, step.query.data(), H * d, first, last);
      }
    });
    step.run_attention_kernel(p);
    step.dense(output_, step.attended.data(), H * d, y, D, n);
  }

 private:
  AttentionSpec spec_;
  // query (q_proj | qk_proj | qkv_proj), key (k_proj), value (v_proj), content (kv_proj: the
  // shared K=V stream), key_norm (knorm, or with query_norm qknorm)
  DenseWeights query_, key_, value_, content_, output_;
  NormWeights key_norm_, query_norm_;
};

}  // namespace

std::unique_ptr<DecodeAttention> load_standard_decode(nn::AttentionImpl& module,
                                                      DType weight_dtype) {
  return std::make_unique<StandardDecode>(module_of<nn::StandardAttentionImpl>(module),
                                          weight_dtype);
}

}  // namespace kvlab::infer
