#include "infer/attention_step.h"

#include <chrono>
#include <cmath>

#include "cache/decode_params.h"
#include "kernels/rope.h"
#include "kernels/target_clones.h"

namespace kvlab::infer {
namespace {

using StepClock = std::chrono::steady_clock;

double us_since(StepClock::time_point start) {
  return std::chrono::duration<double, std::micro>(StepClock::now() - start).count();
}

// y = (x − mean) / √(squares / n + eps) · weight (+ bias), in double: the output pass both norms
// share. Inlined into each clone of its callers.
[[gnu::always_inline]] inline void write_normed(const NormWeights& norm, const float* x,
                                                double mean, double squares, float* y) {
  const int64_t n = norm.width;
  const double inv = 1.0 / std::sqrt(squares / static_cast<double>(n) + norm.eps);
  const float* weight = norm.weight.data();
  const float* bias = norm.bias.empty() ? nullptr : norm.bias.data();
  for (int64_t i = 0; i < n; ++i) {
    const double v = (x[i] - mean) * inv * weight[i];
    y[i] = static_cast<float>(bias == nullptr ? v : v + bias[i]);
  }
}

}  // namespace

// In double, as eight running sums: a loop the compiler vectorises without reassociating (a
// single running sum is one dependent add per element: 1.1 µs a row of 1024 against 0.35).
KVLAB_CLONES void apply_norm(const NormWeights& norm, const float* x, float* y) {
  constexpr int64_t kLanes = 8;
  const int64_t n = norm.width, whole = n / kLanes * kLanes;
  const auto sum = [&](auto term) {
    double lanes[kLanes] = {};
    for (int64_t i = 0; i < whole; i += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += term(i + j);
    }
    for (int64_t i = whole; i < n; ++i) lanes[0] += term(i);
    double total = 0;
    for (double lane : lanes) total += lane;
    return total;
  };
  double mean = 0;
  if (norm.kind == NormKind::kLayerNorm) {
    mean = sum([&](int64_t i) { return static_cast<double>(x[i]); }) / static_cast<double>(n);
  }
  const double square = sum([&](int64_t i) {
    const double centred = x[i] - mean;
    return centred * centred;
  });
  write_normed(norm, x, mean, square, y);
}

KVLAB_CLONES void add_and_norm(const NormWeights& norm, float* h, const float* residual, float* y) {
  if (norm.kind != NormKind::kRmsNorm || residual == nullptr) {
    if (residual != nullptr) {
      for (int64_t i = 0; i < norm.width; ++i) h[i] += residual[i];
    }
    apply_norm(norm, h, y);
    return;
  }
  // apply_norm's eight running sums of squares, taken as the residual is added (a pass less)
  constexpr int64_t kLanes = 8;
  const int64_t n = norm.width, whole = n / kLanes * kLanes;
  double lanes[kLanes] = {};
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const float v = h[i + j] + residual[i + j];
      h[i + j] = v;
      lanes[j] += static_cast<double>(v) * v;
    }
  }
  for (int64_t i = whole; i < n; ++i) {
    h[i] += residual[i];
    lanes[0] += static_cast<double>(h[i]) * h[i];
  }
  double square = 0;
  for (double lane : lanes) square += lane;
  write_normed(norm, h, 0.0, square, y);
}

AttentionStep::AttentionStep(PagedKvCache& cache, FastDecoder& decoder, int64_t d_model)
    : cache_(cache), decoder_(decoder), d_model_(d_model) {}

void AttentionStep::reserve(const ScratchWidths& w, int64_t max_batch, int64_t max_tokens) {
  const auto rows = [max_batch](int64_t width) { return static_cast<size_t>(max_batch * width); };
  proj_a.resize(rows(w.proj_a));
  proj_b.resize(rows(w.proj_b));
  proj_c.resize(rows(w.proj_c));
  query.resize(rows(w.query));
  query_rope.resize(rows(w.query_rope));
  attended.resize(rows(w.attended));
  expanded.resize(rows(w.expanded));
  rope_stride_ = w.rope + 2;
  rope_rows_.resize(static_cast<size_t>(max_batch * rope_stride_));
  rope_keys_.assign(static_cast<size_t>(max_batch), RopeRowKey{});
  seqs_.reserve(static_cast<size_t>(max_batch));
  positions_.resize(static_cast<size_t>(max_batch));
  row_tokens_.resize(static_cast<size_t>(max_batch));
  table_.indptr.reserve(static_cast<size_t>(max_batch + 1));
  table_.last_page_len.reserve(static_cast<size_t>(max_batch));
  table_.page_ids.reserve(static_cast<size_t>(
      max_batch * ((max_tokens + cache_.page_size() - 1) / cache_.page_size())));
}

void AttentionStep::dense(const DenseWeights& layer, const float* x, int64_t x_stride, float* y,
                          int64_t y_stride, int64_t n) {
  const DenseOutput output[] = {{&layer, y, y_stride}};
  dense(output, x, x_stride, n);
}

void AttentionStep::dense(std::span<const DenseOutput> outputs, const float* x, int64_t x_stride,
                          int64_t n) {
  MatVecParams products[kMaxSharedProducts];
  int64_t count = 0;
  const auto start = profile_ != nullptr ? StepClock::now() : StepClock::time_point();
  for (const DenseOutput& out : outputs) {
    const DenseWeights& layer = *out.layer;
    if (layer.empty()) continue;
    MatVecParams p;
    p.weight = layer.data();
    p.weight_dtype = layer.dtype;
    p.weight_order = layer.weight_order;
    p.bias = layer.bias.empty() ? nullptr : layer.bias.data();
    p.x = x;
    p.y = out.y;
    p.n = n;
    p.in = layer.in;
    p.out = layer.out;
    p.x_stride = x_stride;
    p.y_stride = out.y_stride;
    if (count == kMaxSharedProducts || (count > 0 && !shares_x(products[0], p))) {
      decoder_.run(products, count);
      count = 0;
    }
    products[count++] = p;
  }
  if (count > 0) decoder_.run(products, count);
  if (profile_ != nullptr) profile_->dense_us += us_since(start);
}

void AttentionStep::per_head(const float* weights, const float* bias, int64_t out, int64_t in,
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
    const auto start = profile_ != nullptr ? StepClock::now() : StepClock::time_point();
    decoder_.run(m);
    if (profile_ != nullptr) profile_->dense_us += us_since(start);
  }
}

void AttentionStep::rotate(float* x, int64_t width, int64_t b, const AttentionSpec& spec) {
  const int64_t position = pos(b);
  float* row = rope_rows_.data() + b * rope_stride_;
  RopeRowKey& key = rope_keys_[static_cast<size_t>(b)];
  if (position != key.pos || width != key.width || spec.rope_theta != key.theta ||
      spec.rope_scaling != key.scaling) {
    rope_row(position, width, spec.rope_theta, spec.rope_scaling, row);
    key = {position, width, spec.rope_theta, spec.rope_scaling};
  }
  rotate_by_row(x, width, row);
}

void AttentionStep::store_rows(int64_t layer, StreamRole role, const float* rows, int64_t width,
                               int64_t first, int64_t last) {
  const int64_t stream = cache_.stream(role);
  for (int64_t b = first; b < last; ++b) {
    cache_.store_token(layer, stream, seq(b), pos(b), rows + b * width);
  }
}

DecodeParams AttentionStep::kernel_params(const AttentionSpec& spec, int64_t layer) {
  DecodeParams p = decode_params_for(spec, cache_, layer, table_);
  p.q = query.data();
  p.out = attended.data();
  return p;
}

void AttentionStep::expand_values(const AbsorbedUpProjections& up, int64_t value_dim,
                                  int64_t latent_dim, int64_t row, int64_t n, int64_t H) {
  per_head(up.value_up.data(), up.value_up_bias.empty() ? nullptr : up.value_up_bias.data(),
           value_dim, latent_dim, attended.data(), row, expanded.data(), n, H);
}

void AttentionStep::run_attention_kernel(DecodeParams& p) {
  p.precision = attn_precision_;
  effective_precision_ = effective_precision(p);
  const auto start = profile_ != nullptr ? StepClock::now() : StepClock::time_point();
  decoder_.run(p);
  if (profile_ != nullptr) profile_->attention_us += us_since(start);
}

void AttentionStep::run_linear_step(const LinearStepParams& p) {
  const auto start = profile_ != nullptr ? StepClock::now() : StepClock::time_point();
  decoder_.run(p);
  if (profile_ != nullptr) profile_->attention_us += us_since(start);
}

}  // namespace kvlab::infer
