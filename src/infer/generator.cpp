#include "infer/generator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "infer/load_decode_weights.h"
#include "kernels/convert.h"
#include "kernels/fast_decoder.h"

namespace kvlab::infer {
namespace {

const torch::TensorOptions kF32 = torch::TensorOptions().dtype(torch::kFloat32);

}  // namespace

Generator::Generator(nn::TransformerModel model, DType cache_dtype, int64_t max_tokens_per_seq,
                     int64_t max_seqs, int threads, std::optional<DType> rope_dtype,
                     std::optional<KeyOrder> key_order, int64_t max_pages, DType weight_dtype)
    : layout_([&] {
        if (!model->config().shape.causal()) {
          throw std::invalid_argument("decoding needs a causal (decoder) model");
        }
        AttentionSpec spec = model->config().attn;
        spec.cache_dtype = cache_dtype;
        if (rope_dtype.has_value()) spec.rope_cache_dtype = rope_dtype;
        spec.key_cache_order = key_order.value_or(fastest_key_order(spec.cache_layout()));
        if (key_order.has_value()) spec.validate();  // a key order the cache cannot take
        CacheLayout layout = spec.cache_layout();
        if (layout.kernel == DecodeKernel::kNone) {
          throw std::invalid_argument("this attention variant keeps no cache and cannot decode");
        }
        return layout;
      }()),
      cache_(
          layout_, model->config().shape.n_layers, kPageSize,
          max_pages > 0 ? max_pages : max_seqs * ((max_tokens_per_seq + kPageSize - 1) / kPageSize),
          max_seqs),
      decode_(load_decode_weights(model, weight_dtype), cache_, threads, max_seqs,
              max_tokens_per_seq) {}

int32_t Generator::add_sequence() { return cache_.add_sequence(); }

void Generator::free_sequence(int32_t seq) { cache_.free_sequence(seq); }

torch::Tensor Generator::feed(int32_t seq, const std::vector<int64_t>& tokens) {
  c10::InferenceMode guard;
  torch::Tensor logits = torch::empty({decode_.vocab_size()}, kF32);
  decode_.prefill(seq, tokens.data(), static_cast<int64_t>(tokens.size()),
                  logits.data_ptr<float>());
  return logits;
}

void Generator::step(const int32_t* seqs, const int64_t* tokens, int64_t n, float* logits) {
  decode_.step(seqs, tokens, n, logits);
}

torch::Tensor Generator::step(const std::vector<int32_t>& seqs,
                              const std::vector<int64_t>& tokens) {
  if (seqs.size() != tokens.size()) throw std::invalid_argument("one token per sequence");
  const int64_t n = static_cast<int64_t>(seqs.size());
  torch::Tensor logits = torch::empty({n, decode_.vocab_size()}, kF32);
  step(seqs.data(), tokens.data(), n, logits.data_ptr<float>());
  return logits;
}

int64_t greedy_token(const float* logits, int64_t n) {
  return std::max_element(logits, logits + n) - logits;
}

int64_t sample(const torch::Tensor& logits, const SamplingOptions& o, std::mt19937_64& rng) {
  const torch::Tensor l = logits.to(torch::kFloat64).contiguous();
  if (o.temperature < kGreedyBelowTemperature) return l.argmax().item<int64_t>();
  torch::Tensor probs = torch::softmax(l / o.temperature, -1);
  auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
  const int64_t n = sorted.numel();
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, n) : n;
  if (o.top_p < 1.0) {
    const torch::Tensor cumulative = sorted.cumsum(0);
    // smallest prefix whose mass reaches top_p
    const int64_t within = (cumulative < o.top_p).sum().item<int64_t>() + 1;
    keep = std::min(keep, std::max<int64_t>(1, within));
  }
  const double* p = sorted.data_ptr<double>();
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += p[i];
  std::uniform_real_distribution<double> uniform(0.0, total);
  double u = uniform(rng);
  for (int64_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u <= 0) return order[i].item<int64_t>();
  }
  return order[keep - 1].item<int64_t>();
}

}  // namespace kvlab::infer
