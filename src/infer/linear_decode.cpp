// The decode step of linear attention: z = W x, the state in the cache updated by the kernel.
#include "infer/attention_step.h"
#include "infer/decode_attention.h"
#include "infer/weight_copy.h"
#include "nn/linear_attention.h"

namespace kvlab::infer {
namespace {

class LinearDecode final : public DecodeAttention {
 public:
  LinearDecode(nn::LinearAttentionImpl& l, DType weight_dtype) : spec_(l.spec()) {
    query_ = dense_weights(l.qkv_proj, weight_dtype);
    output_ = dense_weights(l.o_proj, weight_dtype);
  }

  const AttentionSpec& spec() const override { return spec_; }

  int64_t weight_bytes() const override { return query_.bytes() + output_.bytes(); }

  ScratchWidths scratch_widths() const override {
    ScratchWidths w;
    w.proj_a = query_.out;
    w.attended = spec_.n_heads * spec_.head_dim;
    return w;
  }

  void run(AttentionStep& step, int64_t layer, const float* x, float* y, int64_t n) const override {
    const int64_t D = step.d_model(), H = spec_.n_heads, d = spec_.head_dim;
    step.dense(query_, x, D, step.proj_a.data(), H * d, n);
    for (int64_t b = 0; b < n; ++b) {
      LinearStepParams p;
      p.z = step.proj_a.data() + b * H * d;
      p.state = step.cache().state(layer, step.seq(b));
      p.out = step.attended.data() + b * H * d;
      p.n_seqs = 1;
      p.n_heads = H;
      p.head_dim = d;
      step.run_linear_step(p);
    }
    step.dense(output_, step.attended.data(), H * d, y, D, n);
  }

 private:
  AttentionSpec spec_;
  DenseWeights query_, output_;  // query: qkv_proj, the one projection Q = K = V
};

}  // namespace

std::unique_ptr<DecodeAttention> load_linear_decode(nn::AttentionImpl& module, DType weight_dtype) {
  return std::make_unique<LinearDecode>(module_of<nn::LinearAttentionImpl>(module), weight_dtype);
}

}  // namespace kvlab::infer
