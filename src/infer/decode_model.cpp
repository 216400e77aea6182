#include "infer/decode_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cache/decode_params.h"
#include "kernels/convert.h"
#include "kernels/rope.h"

namespace kvlab::infer {
namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// x [width] -> y [width]; x and y may be the same array.
void apply_norm(const NormWeights& norm, const float* x, float* y) {
  const int64_t n = norm.width;
  double mean = 0;
  if (norm.kind == NormKind::kLayerNorm) {
    for (int64_t i = 0; i < n; ++i) mean += x[i];
    mean /= static_cast<double>(n);
  }
  double square = 0;
  for (int64_t i = 0; i < n; ++i) square += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(square / static_cast<double>(n) + norm.eps);
  for (int64_t i = 0; i < n; ++i) {
    const double v = (x[i] - mean) * inv * norm.weight[static_cast<size_t>(i)];
    y[i] = static_cast<float>(norm.bias.empty() ? v : v + norm.bias[static_cast<size_t>(i)]);
  }
}

float gelu(float x) {  // torch's exact form: x Φ(x)
  return static_cast<float>(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
}

// torch's gelu(approximate="tanh"), GPT-2's gelu_new: x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³)))
float gelu_tanh(float x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * double(x) * x * x);
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

int64_t max_of(std::initializer_list<int64_t> values) { return std::max(values); }

}  // namespace

DecodeModel::DecodeModel(DecodeWeights weights, PagedKvCache& cache, int threads, int64_t max_batch,
                         int64_t max_tokens)
    : w_(std::move(weights)), cache_(cache), decoder_(threads), max_batch_(max_batch) {
  const ModelShape& shape = w_.shape;
  if (max_batch <= 0) throw std::invalid_argument("decode model: max_batch must be > 0");
  if (w_.layers.empty()) throw std::invalid_argument("decode model: no layers");
  const CacheLayout& layout = cache_.layout();
  const int64_t D = shape.d_model, B = max_batch;
  int64_t proj_a = 0, proj_b = 0, proj_c = 0, query = 0, query_rope = 0, attended = 0;
  int64_t expanded = 0, mlp_width = 0, rope_width = 0, experts = 0, chosen = 0, groups = 0;
  for (const BlockWeights& b : w_.layers) {
    const AttentionWeights& a = b.attention;
    const AttentionSpec& s = a.spec;
    if (!(s.cache_layout().streams == layout.streams) || s.cache_layout().kernel != layout.kernel) {
      throw std::invalid_argument("decode model: the cache is not laid out for " + s.to_string());
    }
    proj_a = max_of({proj_a, a.query.out});
    proj_b =
        max_of({proj_b, a.key.out, a.content.out, a.latent.out, a.query_down.out, a.rope_key.out});
    proj_c = max_of({proj_c, a.value.out, s.latent_dim, a.latent.out});
    const int64_t latent_row = s.latent_dim + s.rope_dim;  // gla's cached row
    query = max_of({query, s.n_heads * max_of({s.head_dim, s.nope_dim, latent_row})});
    query_rope = max_of({query_rope, s.n_heads * s.rope_dim});
    attended = max_of({attended, s.n_heads * max_of({s.head_dim, latent_row})});
    expanded = max_of({expanded, s.n_heads * max_of({s.value_dim, s.latent_dim})});
    rope_width = max_of({rope_width, s.head_dim, s.nope_dim, s.rope_dim});
    const FeedForwardWeights& f = b.mlp;
    mlp_width = max_of({mlp_width, f.dense.up.out});
    for (const MlpWeights& e : f.experts) mlp_width = max_of({mlp_width, e.up.out});
    for (const MlpWeights& e : f.shared_experts) mlp_width = max_of({mlp_width, e.up.out});
    experts = max_of({experts, f.router.out});
    chosen = max_of({chosen, f.routing.experts_per_token});
    groups = max_of({groups, f.routing.n_expert_groups});
  }
  hidden_.resize(static_cast<size_t>(B * D));
  normed_.resize(hidden_.size());
  block_out_.resize(hidden_.size());
  proj_a_.resize(static_cast<size_t>(B * proj_a));
  proj_b_.resize(static_cast<size_t>(B * proj_b));
  proj_c_.resize(static_cast<size_t>(B * proj_c));
  query_.resize(static_cast<size_t>(B * query));
  query_rope_.resize(static_cast<size_t>(B * query_rope));
  attended_.resize(static_cast<size_t>(B * attended));
  expanded_.resize(static_cast<size_t>(B * expanded));
  mlp_a_.resize(static_cast<size_t>(B * mlp_width));
  mlp_b_.resize(mlp_a_.size());
  mlp_out_.resize(hidden_.size());
  expert_out_.resize(static_cast<size_t>(D));
  router_.resize(static_cast<size_t>(B * experts));
  chosen_experts_.resize(static_cast<size_t>(chosen));
  expert_weights_.resize(static_cast<size_t>(chosen));
  route_choice_.resize(static_cast<size_t>(experts));
  group_scores_.resize(static_cast<size_t>(groups));
  chosen_groups_.resize(static_cast<size_t>(groups));
  rope_row_.resize(static_cast<size_t>(rope_width + 2));
  batch_seqs_.reserve(static_cast<size_t>(B));
  positions_.resize(static_cast<size_t>(B));
  table_.indptr.reserve(static_cast<size_t>(B + 1));
  table_.last_page_len.reserve(static_cast<size_t>(B));
  table_.page_ids.reserve(
      static_cast<size_t>(B * ((max_tokens + cache_.page_size() - 1) / cache_.page_size())));
  // keys rotated on read (shared K=V + RoPE; gva dr=0 rebuilds and rotates them over d_n)
  const AttentionSpec& spec = w_.layers[0].attention.spec;
  if (layout.rope_on_read || layout.kernel == DecodeKernel::kReconstructKeys) {
    const PageTable no_sequences;
    const DecodeParams widths = decode_params_for(spec, cache_, 0, no_sequences);
    decoder_.prepare_rope(max_tokens + cache_.page_size(), widths.key_width, spec.rope_theta,
                          spec.rope_scaling);
  }
}

void DecodeModel::dense(const DenseWeights& layer, const float* x, int64_t x_stride, float* y,
                        int64_t y_stride, int64_t n) {
  MatVecParams p;
  p.weight = layer.weight.data();
  p.bias = layer.bias.empty() ? nullptr : layer.bias.data();
  p.x = x;
  p.y = y;
  p.n = n;
  p.in = layer.in;
  p.out = layer.out;
  p.x_stride = x_stride;
  p.y_stride = y_stride;
  const auto start = profile_ != nullptr ? Clock::now() : Clock::time_point();
  decoder_.run(p);
  if (profile_ != nullptr) profile_->dense_us += micros_since(start);
}

void DecodeModel::run_attention_kernel(DecodeParams& p) {
  p.precision = attn_precision_;
  effective_precision_ = effective_precision(p);
  const auto start = profile_ != nullptr ? Clock::now() : Clock::time_point();
  decoder_.run(p);
  if (profile_ != nullptr) profile_->attention_us += micros_since(start);
}

void DecodeModel::per_head(const float* weights, const float* bias, int64_t out, int64_t in,
                           const float* x, int64_t x_width, float* y, int64_t n, int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    MatVecParams m;
    m.weight = weights + h * out * in;
    m.bias = bias != nullptr ? bias + h * out : nullptr;
    m.x = x + h * x_width;
    m.x_stride = H * x_width;
    m.y = y + h * out;
    m.y_stride = H * out;
    m.n = n;
    m.in = in;
    m.out = out;
    const auto start = profile_ != nullptr ? Clock::now() : Clock::time_point();
    decoder_.run(m);
    if (profile_ != nullptr) profile_->dense_us += micros_since(start);
  }
}

void DecodeModel::rotate(float* x, int64_t width, int64_t pos, const AttentionSpec& spec) {
  const int64_t half = width / 2;
  if (pos != rope_pos_ || width != rope_width_ || spec.rope_theta != rope_theta_ ||
      spec.rope_scaling != rope_scaling_) {
    rope_row(pos, width, spec.rope_theta, spec.rope_scaling, rope_row_.data());
    rope_pos_ = pos;
    rope_width_ = width;
    rope_theta_ = spec.rope_theta;
    rope_scaling_ = spec.rope_scaling;
  }
  const float* cos = rope_row_.data();
  const float* sin = rope_row_.data() + half;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[half + i];
    x[i] = x1 * cos[i] - x2 * sin[i];
    x[half + i] = x2 * cos[i] + x1 * sin[i];
  }
}

void DecodeModel::store_rows(int64_t layer, StreamRole role, const float* rows, int64_t width,
                             int64_t n) {
  const int64_t stream = cache_.stream(role);
  for (int64_t b = 0; b < n; ++b) {
    cache_.store_token(layer, stream, batch_seqs_[static_cast<size_t>(b)],
                       positions_[static_cast<size_t>(b)], rows + b * width);
  }
}

void DecodeModel::mlp(const MlpWeights& m, const float* x, float* y, int64_t n) {
  const int64_t width = m.up.out, D = w_.shape.d_model;
  dense(m.up, x, D, mlp_a_.data(), width, n);  // [n, width]
  if (m.kind == MlpKind::kSwiglu) {
    dense(m.gate, x, D, mlp_b_.data(), width, n);
    for (int64_t i = 0; i < n * width; ++i) {
      mlp_a_[static_cast<size_t>(i)] *= silu(mlp_b_[static_cast<size_t>(i)]);
    }
  } else {
    float (*const activation)(float) = m.kind == MlpKind::kGeluTanh ? gelu_tanh : gelu;
    for (int64_t i = 0; i < n * width; ++i) {
      mlp_a_[static_cast<size_t>(i)] = activation(mlp_a_[static_cast<size_t>(i)]);
    }
  }
  dense(m.down, mlp_a_.data(), width, y, D, n);  // [n, D]
}

void DecodeModel::route(const FeedForwardWeights& f, float* scores) {
  const MoeShape& r = f.routing;
  const int64_t E = f.router.out, k = r.experts_per_token;
  if (r.scoring == MoeScoring::kSoftmax) {
    const float top = *std::max_element(scores, scores + E);
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += (scores[e] = std::exp(scores[e] - top));
    for (int64_t e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / total);
  } else {
    for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-scores[e]));
  }
  float* choice = route_choice_.data();  // what is ranked: the score (+ the correction bias)
  for (int64_t e = 0; e < E; ++e) {
    choice[e] = scores[e] + (f.score_correction.empty() ? 0.0f : f.score_correction[e]);
  }
  // top-k of values[0, n) into out (the first index wins a tie, as torch's topk on CPU)
  const auto top_k = [](const float* values, int64_t n, int64_t count, int64_t* out) {
    for (int64_t c = 0; c < count; ++c) {
      int64_t best = -1;
      for (int64_t e = 0; e < n; ++e) {
        if (std::find(out, out + c, e) == out + c && (best < 0 || values[e] > values[best])) {
          best = e;
        }
      }
      out[c] = best;
    }
  };
  if (r.n_expert_groups > 1) {
    const int64_t G = r.n_expert_groups, size = E / G;
    for (int64_t g = 0; g < G; ++g) {
      const float* group = choice + g * size;
      int64_t best[2] = {0, 0};
      const int64_t ranked = r.group_score == MoeGroupScore::kMax ? 1 : 2;
      top_k(group, size, ranked, best);
      group_scores_[static_cast<size_t>(g)] =
          group[best[0]] + (ranked == 2 ? group[best[1]] : 0.0f);
    }
    top_k(group_scores_.data(), G, r.groups_per_token, chosen_groups_.data());
    for (int64_t g = 0; g < G; ++g) {
      if (std::find(chosen_groups_.begin(), chosen_groups_.begin() + r.groups_per_token, g) ==
          chosen_groups_.begin() + r.groups_per_token) {
        std::fill(choice + g * size, choice + (g + 1) * size,
                  -std::numeric_limits<float>::infinity());
      }
    }
  }
  top_k(choice, E, k, chosen_experts_.data());
  double total = 0;
  for (int64_t c = 0; c < k; ++c) total += scores[chosen_experts_[static_cast<size_t>(c)]];
  for (int64_t c = 0; c < k; ++c) {
    double w = scores[chosen_experts_[static_cast<size_t>(c)]];
    if (r.normalize_top_k) w /= total + 1e-20;
    expert_weights_[static_cast<size_t>(c)] = static_cast<float>(w * r.routed_scale);
  }
}

void DecodeModel::feed_forward(const FeedForwardWeights& f, const float* x, float* y, int64_t n) {
  const int64_t D = w_.shape.d_model;
  if (!f.is_moe()) {
    mlp(f.dense, x, y, n);
    return;
  }
  const int64_t E = f.router.out, k = f.routing.experts_per_token;
  dense(f.router, x, D, router_.data(), E, n);  // [n, E]
  std::fill(y, y + n * D, 0.0f);
  for (int64_t b = 0; b < n; ++b) {
    route(f, router_.data() + b * E);
    for (int64_t c = 0; c < k; ++c) {
      const int64_t e = chosen_experts_[static_cast<size_t>(c)];
      const float weight = expert_weights_[static_cast<size_t>(c)];
      mlp(f.experts[static_cast<size_t>(e)], x + b * D, expert_out_.data(), 1);
      for (int64_t i = 0; i < D; ++i) y[b * D + i] += weight * expert_out_[static_cast<size_t>(i)];
    }
  }
  for (const MlpWeights& shared : f.shared_experts) {
    for (int64_t b = 0; b < n; ++b) {
      mlp(shared, x + b * D, expert_out_.data(), 1);
      for (int64_t i = 0; i < D; ++i) y[b * D + i] += expert_out_[static_cast<size_t>(i)];
    }
  }
}

void DecodeModel::attention(int64_t layer, const float* x, float* y, int64_t n) {
  const AttentionWeights& a = w_.layers[static_cast<size_t>(layer)].attention;
  switch (a.spec.family()) {
    case AttnFamily::kStandard:
      return standard_attention(layer, a, x, y, n);
    case AttnFamily::kGva:
    case AttnFamily::kGta:
      return gva_attention(layer, a, x, y, n);
    case AttnFamily::kMla:
      return mla_attention(layer, a, x, y, n);
    case AttnFamily::kLinear:
      return linear_attention(layer, a, x, y, n);
    case AttnFamily::kGla:
      return gla_attention(layer, a, x, y, n);
  }
}

// z = W x; the state lives in the cache.
void DecodeModel::linear_attention(int64_t layer, const AttentionWeights& a, const float* x,
                                   float* y, int64_t n) {
  const int64_t D = w_.shape.d_model, H = a.spec.n_heads, d = a.spec.head_dim;
  dense(a.query, x, D, proj_a_.data(), H * d, n);
  for (int64_t b = 0; b < n; ++b) {
    LinearStepParams p;
    p.z = proj_a_.data() + b * H * d;
    p.state = cache_.state(layer, batch_seqs_[static_cast<size_t>(b)]);
    p.out = attended_.data() + b * H * d;
    p.n_seqs = 1;
    p.n_heads = H;
    p.head_dim = d;
    const auto start = profile_ != nullptr ? Clock::now() : Clock::time_point();
    decoder_.run(p);
    if (profile_ != nullptr) profile_->attention_us += micros_since(start);
  }
  dense(a.output, attended_.data(), H * d, y, D, n);
}

// gva and gta: one stream of value rows (the tied state for gta) and the shared rope key.
void DecodeModel::gva_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y,
                                int64_t n) {
  const AttentionSpec& s = a.spec;
  const int64_t D = w_.shape.d_model, H = s.n_heads, d = s.head_dim;
  auto pos = [&](int64_t b) { return positions_[static_cast<size_t>(b)]; };
  DecodeParams p = decode_params_for(s, cache_, layer, table_);
  p.q = query_.data();
  p.out = attended_.data();
  const int64_t dn = s.nope_dim, dr = s.rope_dim, q_width = dn + dr;
  dense(a.query, x, D, proj_a_.data(), H * q_width, n);  // [n, H, d_n + d_r]
  dense(a.value, x, D, proj_c_.data(), a.value.out, n);  // [n, G·d_h]
  store_rows(layer, StreamRole::kContent, proj_c_.data(), a.value.out, n);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* q = proj_a_.data() + (b * H + h) * q_width;
      if (!a.query_norm.empty()) apply_norm(a.query_norm, q, q);
      if (dr > 0) {
        rotate(q + dn, dr, pos(b), s);
        std::copy(q + dn, q + q_width, query_rope_.data() + (b * H + h) * dr);
      } else {  // dr = 0: full-width RoPE, keys rebuilt in the kernel
        rotate(q, dn, pos(b), s);
        std::copy(q, q + dn, query_.data() + (b * H + h) * dn);
      }
    }
  }
  if (dr > 0) {
    dense(a.rope_key, x, D, proj_b_.data(), dr, n);  // [n, d_r], shared by all heads
    for (int64_t b = 0; b < n; ++b) rotate(proj_b_.data() + b * dr, dr, pos(b), s);
    store_rows(layer, StreamRole::kRope, proj_b_.data(), dr, n);
    if (a.key_maps.empty()) {  // gta: M_h selects the first d_n channels, q̃_h = [q_h^nope ; 0]
      for (int64_t bh = 0; bh < n * H; ++bh) {
        const float* q = proj_a_.data() + bh * q_width;
        float* q_tilde = query_.data() + bh * d;
        std::copy(q, q + dn, q_tilde);
        std::fill(q_tilde + dn, q_tilde + d, 0.0f);
      }
    } else {  // q̃_h = M_h q_h^nope: M_h [d_h][d_n] is a [out][in] matrix
      per_head(a.key_maps.data(), nullptr, d, dn, proj_a_.data(), q_width, query_.data(), n, H);
    }
    p.q_rope = query_rope_.data();
  } else {
    p.key_maps = a.key_maps.data();
  }
  run_attention_kernel(p);
  dense(a.output, attended_.data(), H * d, y, D, n);
}

// mla: W_uk folded into the query, W_uv applied to the weighted sum of latent rows.
void DecodeModel::mla_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y,
                                int64_t n) {
  const AttentionSpec& s = a.spec;
  const int64_t D = w_.shape.d_model, H = s.n_heads;
  auto pos = [&](int64_t b) { return positions_[static_cast<size_t>(b)]; };
  DecodeParams p = decode_params_for(s, cache_, layer, table_);
  p.q = query_.data();
  p.out = attended_.data();
  const int64_t dn = s.nope_dim, dr = s.rope_dim, dc = s.latent_dim, dv = s.value_dim;
  const int64_t q_width = dn + dr;
  if (!a.query_down.empty()) {
    const int64_t dq = a.query_down.out;
    dense(a.query_down, x, D, proj_b_.data(), dq, n);
    for (int64_t b = 0; b < n; ++b) {
      apply_norm(a.query_down_norm, proj_b_.data() + b * dq, proj_b_.data() + b * dq);
    }
    dense(a.query, proj_b_.data(), dq, proj_a_.data(), H * q_width, n);
  } else {
    dense(a.query, x, D, proj_a_.data(), H * q_width, n);  // [n, H, d_n + d_r]
  }
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* q = proj_a_.data() + (b * H + h) * q_width;
      rotate(q + dn, dr, pos(b), s);
      std::copy(q + dn, q + q_width, query_rope_.data() + (b * H + h) * dr);
    }
  }
  // q̃_h = W_uk,hᵀ q_h^nope: [d_c][d_n] · [d_n]
  per_head(a.key_up_t.data(), nullptr, dc, dn, proj_a_.data(), q_width, query_.data(), n, H);
  dense(a.latent, x, D, proj_b_.data(), dc + dr, n);  // [n, d_c + d_r]
  for (int64_t b = 0; b < n; ++b) {
    float* row = proj_b_.data() + b * (dc + dr);
    if (a.latent_norm.empty()) {  // plainlatent
      std::copy(row, row + dc, proj_c_.data() + b * dc);
    } else {
      apply_norm(a.latent_norm, row, proj_c_.data() + b * dc);  // c: [n, d_c]
    }
    rotate(row + dc, dr, pos(b), s);
  }
  store_rows(layer, StreamRole::kContent, proj_c_.data(), dc, n);
  const int64_t rope_stream = cache_.stream(StreamRole::kRope);
  for (int64_t b = 0; b < n; ++b) {
    // the rope key sits after c in the projection's row: stored on its own
    cache_.store_token(layer, rope_stream, batch_seqs_[static_cast<size_t>(b)], pos(b),
                       proj_b_.data() + b * (dc + dr) + dc);
  }
  p.q_rope = query_rope_.data();
  run_attention_kernel(p);  // attended: [n, H, d_c]
  // v_h = W_uv,h (Σ p c) + b_v,h
  per_head(a.value_up.data(), a.value_up_bias.empty() ? nullptr : a.value_up_bias.data(), dv, dc,
           attended_.data(), dc, expanded_.data(), n, H);
  dense(a.output, expanded_.data(), H * dv, y, D, n);
}

// gla: one row [c_g ; k^rope_g] per latent head, scored by q̃_h = [W_uk,hᵀ q_h^nope ; q_h^rope];
// W_uv,h maps the first d_c channels of the weighted sum.
void DecodeModel::gla_attention(int64_t layer, const AttentionWeights& a, const float* x, float* y,
                                int64_t n) {
  const AttentionSpec& s = a.spec;
  const int64_t D = w_.shape.d_model, H = s.n_heads, C = s.n_groups;
  const int64_t dn = s.nope_dim, dr = s.rope_dim, dc = s.latent_dim, dv = s.value_dim;
  const int64_t q_width = dn + dr, row = dc + dr;
  auto pos = [&](int64_t b) { return positions_[static_cast<size_t>(b)]; };
  DecodeParams p = decode_params_for(s, cache_, layer, table_);
  p.q = query_.data();
  p.out = attended_.data();
  dense(a.query, x, D, proj_a_.data(), H * q_width, n);  // [n, H, d_n + d_r]
  // W_uk,hᵀ q_h^nope: [d_c][d_n] · [d_n] -> expanded_ [n, H, d_c]
  per_head(a.key_up_t.data(), nullptr, dc, dn, proj_a_.data(), q_width, expanded_.data(), n, H);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* q = proj_a_.data() + (b * H + h) * q_width;
      rotate(q + dn, dr, pos(b), s);
      float* q_tilde = query_.data() + (b * H + h) * row;  // [d_c + d_r]
      const float* absorbed = expanded_.data() + (b * H + h) * dc;
      std::copy(absorbed, absorbed + dc, q_tilde);
      std::copy(q + dn, q + q_width, q_tilde + dc);
    }
  }
  dense(a.latent, x, D, proj_b_.data(), C * row, n);  // [n, C, d_c + d_r]
  for (int64_t bg = 0; bg < n * C; ++bg) {
    float* projected = proj_b_.data() + bg * row;
    float* cached = proj_c_.data() + bg * row;
    apply_norm(a.latent_norm, projected, cached);
    rotate(projected + dc, dr, pos(bg / C), s);
    std::copy(projected + dc, projected + row, cached + dc);
  }
  store_rows(layer, StreamRole::kContent, proj_c_.data(), C * row, n);
  run_attention_kernel(p);  // attended: [n, H, d_c + d_r]
  // v_h = W_uv,h (Σ p c)[0:d_c] + b_v,h
  per_head(a.value_up.data(), a.value_up_bias.empty() ? nullptr : a.value_up_bias.data(), dv, dc,
           attended_.data(), row, expanded_.data(), n, H);
  dense(a.output, expanded_.data(), H * dv, y, D, n);
}

// mha, gqa, mqa, qk-v, q-kv, qkv1, q-gqa, q-mqa.
void DecodeModel::standard_attention(int64_t layer, const AttentionWeights& a, const float* x,
                                     float* y, int64_t n) {
  const AttentionSpec& s = a.spec;
  const int64_t D = w_.shape.d_model, H = s.n_heads, d = s.head_dim;
  auto pos = [&](int64_t b) { return positions_[static_cast<size_t>(b)]; };
  DecodeParams p = decode_params_for(s, cache_, layer, table_);
  p.q = query_.data();
  p.out = attended_.data();
  const bool rope = s.pos == PosScheme::kRope;
  dense(a.query, x, D, proj_a_.data(), H * d, n);  // [n, H, d], unrotated
  if (s.shares_kv()) {  // one stream C: kv_proj, or the query itself (qkv1); unrotated
    const float* content = proj_a_.data();
    int64_t width = H * d;
    if (!a.content.empty()) {
      dense(a.content, x, D, proj_b_.data(), a.content.out, n);
      content = proj_b_.data();
      width = a.content.out;
    }
    store_rows(layer, StreamRole::kContent, content, width, n);
    if (cache_.layout().norm_on_read) {
      p.norm_weight = a.key_norm.weight.data();
      p.norm_eps = a.key_norm.eps;
    }
  } else {
    dense(a.value, x, D, proj_c_.data(), a.value.out, n);
    store_rows(layer, StreamRole::kValue, proj_c_.data(), a.value.out, n);
    if (!a.key.empty()) {
      dense(a.key, x, D, proj_b_.data(), a.key.out, n);
      const int64_t G = a.key.out / d;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t g = 0; g < G; ++g) {
          float* k = proj_b_.data() + (b * G + g) * d;
          if (s.qk_norm) apply_norm(a.key_norm, k, k);
          if (rope) rotate(k, d, pos(b), s);
        }
      }
      store_rows(layer, StreamRole::kKey, proj_b_.data(), a.key.out, n);
    }
  }
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* q = query_.data() + (b * H + h) * d;
      std::copy(proj_a_.data() + (b * H + h) * d, proj_a_.data() + (b * H + h + 1) * d, q);
      if (s.qk_norm) apply_norm(a.query_norm, q, q);
      if (rope) rotate(q, d, pos(b), s);
    }
  }
  if (a.key.empty() && !s.shares_kv()) {  // Q = K: the rotated queries are the keys
    store_rows(layer, StreamRole::kKey, query_.data(), H * d, n);
  }
  run_attention_kernel(p);
  dense(a.output, attended_.data(), H * d, y, D, n);
}

void DecodeModel::step(const int32_t* seqs, const int64_t* tokens, int64_t n, float* logits) {
  const auto step_start = profile_ != nullptr ? Clock::now() : Clock::time_point();
  const ModelShape& shape = w_.shape;
  const int64_t D = shape.d_model, V = shape.vocab_size;
  if (n <= 0 || n > max_batch_) {
    throw std::invalid_argument("decode step: batch of " + std::to_string(n) + " sequences (1.." +
                                std::to_string(max_batch_) + " allowed)");
  }
  const int64_t learned_positions =
      static_cast<int64_t>(w_.embed_positions.size()) / std::max<int64_t>(1, D);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t other = 0; other < b; ++other) {
      if (seqs[other] == seqs[b]) {
        throw std::invalid_argument("decode step: sequence " + std::to_string(seqs[b]) +
                                    " appears twice in one batch");
      }
    }
    if (tokens[b] < 0 || tokens[b] >= V) {
      throw std::invalid_argument("decode step: token " + std::to_string(tokens[b]) +
                                  " is outside the vocabulary of " + std::to_string(V));
    }
    if (!w_.embed_positions.empty() && cache_.length(seqs[b]) >= learned_positions) {
      throw std::invalid_argument(
          "decode step: position " + std::to_string(cache_.length(seqs[b])) +
          " exceeds the learned table of " + std::to_string(learned_positions));
    }
  }
  batch_seqs_.assign(seqs, seqs + n);
  int64_t appended = 0;
  try {
    for (; appended < n; ++appended) {
      positions_[static_cast<size_t>(appended)] = cache_.append(seqs[appended], 1);
    }
  } catch (...) {  // leave every sequence as it was
    for (int64_t b = 0; b < appended; ++b) {
      cache_.truncate(seqs[b], positions_[static_cast<size_t>(b)]);
    }
    throw;
  }
  cache_.page_table_into(batch_seqs_, table_);

  for (int64_t b = 0; b < n; ++b) {  // embedding (+ learned or fixed positions)
    float* h = hidden_.data() + b * D;
    const float* e = w_.embed_tokens.data() + tokens[b] * D;
    std::copy(e, e + D, h);
    const int64_t pos = positions_[static_cast<size_t>(b)];
    if (!w_.embed_positions.empty()) {
      const float* pe = w_.embed_positions.data() + pos * D;
      for (int64_t i = 0; i < D; ++i) h[i] += pe[i];
    } else if (shape.pos == PosScheme::kSinusoidal) {
      for (int64_t i = 0; i < D; ++i) {
        const double angle =
            static_cast<double>(pos) *
            std::pow(10000.0, -2.0 * static_cast<double>(i / 2) / static_cast<double>(D));
        h[i] += static_cast<float>(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  }
  for (int64_t l = 0; l < static_cast<int64_t>(w_.layers.size()); ++l) {
    const BlockWeights& block = w_.layers[static_cast<size_t>(l)];
    for (int64_t b = 0; b < n; ++b) {
      apply_norm(block.input_norm, hidden_.data() + b * D, normed_.data() + b * D);
    }
    attention(l, normed_.data(), block_out_.data(), n);
    for (int64_t i = 0; i < n * D; ++i)
      hidden_[static_cast<size_t>(i)] += block_out_[static_cast<size_t>(i)];
    for (int64_t b = 0; b < n; ++b) {
      apply_norm(block.post_attention_norm, hidden_.data() + b * D, normed_.data() + b * D);
    }
    feed_forward(block.mlp, normed_.data(), mlp_out_.data(), n);
    for (int64_t i = 0; i < n * D; ++i)
      hidden_[static_cast<size_t>(i)] += mlp_out_[static_cast<size_t>(i)];
  }
  for (int64_t b = 0; b < n; ++b) {
    apply_norm(w_.final_norm, hidden_.data() + b * D, normed_.data() + b * D);
  }
  dense(w_.lm_head, normed_.data(), D, logits, V, n);
  if (profile_ != nullptr) {
    profile_->step_us += micros_since(step_start);
    ++profile_->steps;
  }
}

}  // namespace kvlab::infer
