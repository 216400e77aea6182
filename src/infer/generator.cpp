#include "infer/generator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/convert.h"
#include "nn/gva_attention.h"
#include "nn/linear_attention.h"
#include "nn/standard_attention.h"

namespace kvlab::infer {
namespace {

const torch::TensorOptions kF32 = torch::TensorOptions().dtype(torch::kFloat32);

nn::TransformerBlockImpl& block(nn::TransformerModel& model, int64_t layer) {
  return *model->model->layers[static_cast<size_t>(layer)]->as<nn::TransformerBlockImpl>();
}

}  // namespace

Generator::Generator(nn::TransformerModel model, DType cache_dtype, int64_t max_tokens_per_seq,
                     int64_t max_seqs, int threads)
    : model_(std::move(model)),
      layout_([&] {
        AttentionSpec spec = model_->config().attn;
        spec.cache_dtype = cache_dtype;
        return spec.cache_layout();
      }()),
      cache_(layout_, model_->config().shape.n_layers, 16,
             max_seqs * ((max_tokens_per_seq + 15) / 16), max_seqs),
      decoder_(threads) {
  if (!model_->config().shape.causal()) {
    throw std::invalid_argument("decoding needs a causal (decoder) model");
  }
  if (layout_.kernel == DecodeKernel::kNone) {
    throw std::invalid_argument("this attention variant keeps no cache and cannot decode");
  }
  if (cache_dtype == DType::kFp8) throw std::invalid_argument("fp8 caches are counted, not stored");
  const int64_t layers = model_->config().shape.n_layers;
  linear_kv_.resize(static_cast<size_t>(layers));
  linear_sum_.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    linear_kv_[static_cast<size_t>(l)].resize(static_cast<size_t>(max_seqs));
    linear_sum_[static_cast<size_t>(l)].resize(static_cast<size_t>(max_seqs));
    nn::AttentionImpl& attn = *block(model_, l).self_attn;
    if (layout_.kernel == DecodeKernel::kReconstructKeys) {
      key_maps_.push_back(dynamic_cast<nn::GvaAttentionImpl&>(attn)
                              .key_maps.detach()
                              .to(torch::kFloat32)
                              .contiguous());
    }
    if (layout_.norm_on_read) {
      norm_weights_.push_back(dynamic_cast<nn::StandardAttentionImpl&>(attn)
                                  .k_norm->weight.detach()
                                  .to(torch::kFloat32)
                                  .contiguous());
    }
  }
}

int32_t Generator::add_sequence() {
  const int32_t seq = cache_.add_sequence();
  if (layout_.kernel == DecodeKernel::kRecurrentState) {
    for (int64_t l = 0; l < static_cast<int64_t>(linear_kv_.size()); ++l) {
      auto* attn = dynamic_cast<nn::LinearAttentionImpl*>(block(model_, l).self_attn.get());
      auto state = attn->initial_state(1, kF32);
      linear_kv_[static_cast<size_t>(l)][static_cast<size_t>(seq)] = state.kv;
      linear_sum_[static_cast<size_t>(l)][static_cast<size_t>(seq)] = state.sum;
    }
  }
  return seq;
}

void Generator::free_sequence(int32_t seq) { cache_.free_sequence(seq); }

void Generator::write_rows(int64_t layer, int32_t seq, int64_t first_pos,
                           const std::vector<torch::Tensor>& rows) {
  for (size_t s = 0; s < rows.size(); ++s) {
    const torch::Tensor r = rows[s][0].to(torch::kFloat32).contiguous();  // [T, heads, width]
    for (int64_t t = 0; t < r.size(0); ++t) {
      store_row(r[t].data_ptr<float>(), r[t].numel(), layout_.dtype,
                cache_.row(layer, static_cast<int64_t>(s), seq, first_pos + t));
    }
  }
}

std::vector<torch::Tensor> Generator::gather_rows(int64_t layer, int32_t seq) {
  std::vector<torch::Tensor> out;
  const int64_t tokens = cache_.length(seq);
  for (size_t s = 0; s < layout_.streams.size(); ++s) {
    const CacheStream& st = layout_.streams[s];
    torch::Tensor t = torch::empty({1, tokens, st.n_heads, st.head_width}, kF32);
    float* dst = t.data_ptr<float>();
    for (int64_t pos = 0; pos < tokens; ++pos) {
      const std::byte* row = cache_.row(layer, static_cast<int64_t>(s), seq, pos);
      for (int64_t i = 0; i < st.width(); ++i)
        dst[pos * st.width() + i] = load_element(row, layout_.dtype, i);
    }
    out.push_back(t);
  }
  return out;
}

torch::Tensor Generator::attend(int64_t layer, int32_t seq, const torch::Tensor& x, int64_t pos) {
  nn::AttentionImpl& attn = *block(model_, layer).self_attn;
  const nn::AttentionImpl::DecodeQuery query = attn.decode_query(x, pos);
  const int64_t H = attn.spec().n_heads;
  cache_.page_table_into({seq}, table_);
  DecodeParams p = cache_.decode_params(layer, table_, H);
  if (layout_.kernel == DecodeKernel::kReconstructKeys) {  // gva dr=0
    p.key_maps = key_maps_[static_cast<size_t>(layer)].data_ptr<float>();
    p.key_width = attn.spec().nope_dim;
    p.rope_on_read = true;
  }
  const torch::Tensor q = query.q.to(torch::kFloat32).contiguous();
  const torch::Tensor q_rope =
      p.rope_width > 0 ? query.q_rope.to(torch::kFloat32).contiguous() : torch::Tensor();
  torch::Tensor out = torch::empty({1, 1, H, p.value_width}, kF32);
  p.q = q.data_ptr<float>();
  p.q_rope = p.rope_width > 0 ? q_rope.data_ptr<float>() : nullptr;
  p.scale = static_cast<float>(query.scale);
  p.rope_theta = attn.spec().rope_theta;
  if (layout_.norm_on_read)
    p.norm_weight = norm_weights_[static_cast<size_t>(layer)].data_ptr<float>();
  p.out = out.data_ptr<float>();
  decoder_.run(p);
  return attn.decode_output(out.to(x.dtype()));
}

torch::Tensor Generator::run_tokens(int32_t seq, const std::vector<int64_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t pos = cache_.append(seq, T);
  const torch::Tensor input = torch::tensor(tokens, torch::kInt64).view({1, T});
  torch::Tensor h = model_->model->embed(input, pos);  // [1, T, D]
  for (int64_t l = 0; l < model_->config().shape.n_layers; ++l) {
    nn::TransformerBlockImpl& b = block(model_, l);
    const torch::Tensor x = b.input_layernorm(h);
    torch::Tensor attended;
    if (layout_.kernel == DecodeKernel::kRecurrentState) {
      auto* attn = dynamic_cast<nn::LinearAttentionImpl*>(b.self_attn.get());
      nn::LinearAttentionImpl::State state{
          linear_kv_[static_cast<size_t>(l)][static_cast<size_t>(seq)],
          linear_sum_[static_cast<size_t>(l)][static_cast<size_t>(seq)]};
      std::vector<torch::Tensor> outputs;
      for (int64_t t = 0; t < T; ++t) outputs.push_back(attn->step(x.narrow(1, t, 1), state));
      attended = T == 1 ? outputs[0] : torch::cat(outputs, 1);
      linear_kv_[static_cast<size_t>(l)][static_cast<size_t>(seq)] = state.kv;
      linear_sum_[static_cast<size_t>(l)][static_cast<size_t>(seq)] = state.sum;
    } else {
      write_rows(l, seq, pos, b.self_attn->cache_rows(x, pos));
      // One token: the raw kernel over the pages. A prompt: the module's decode form, all
      // of its tokens in one pass over rows read back from the cache (so prefill sees the
      // same rounded rows decode will).
      attended = T == 1 ? attend(l, seq, x, pos)
                        : b.self_attn->forward_from_cache(x, gather_rows(l, seq), pos);
    }
    h = h + attended;
    h = h + b.mlp->forward(b.post_attention_layernorm(h));
  }
  h = model_->model->norm(h.narrow(1, T - 1, 1));
  const torch::Tensor logits =
      model_->lm_head ? model_->lm_head(h) : torch::matmul(h, model_->model->embed_tokens.t());
  return logits.view({-1});
}

torch::Tensor Generator::feed(int32_t seq, const std::vector<int64_t>& tokens) {
  c10::InferenceMode guard;
  if (tokens.empty()) throw std::invalid_argument("feed needs at least one token");
  return run_tokens(seq, tokens);
}

torch::Tensor Generator::step(const std::vector<int32_t>& seqs,
                              const std::vector<int64_t>& tokens) {
  c10::InferenceMode guard;
  if (seqs.size() != tokens.size()) throw std::invalid_argument("one token per sequence");
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < seqs.size(); ++i) rows.push_back(run_tokens(seqs[i], {tokens[i]}));
  return torch::stack(rows);
}

int64_t sample(const torch::Tensor& logits, const SamplingOptions& o, std::mt19937_64& rng) {
  const torch::Tensor l = logits.to(torch::kFloat64).contiguous();
  if (o.temperature <= 0) return l.argmax().item<int64_t>();
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
