#include "kernels/causal_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_nonpositive.h"
#include "kernels/gemm.h"
#include "kernels/target_clones.h"

// Every inner loop is an axpy over contiguous elements (keys and values transposed once per
// item so the score and dp loops run along keys), which the compiler vectorises under
// KVLAB_CLONES without reassociating sums.

namespace kvlab {

namespace {
template <class T>
[[gnu::always_inline]] inline void axpy(T a, const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// max and sum of a row with eight running values, so neither waits on one dependency chain
template <class T>
[[gnu::always_inline]] inline T row_max(const T* x, int64_t n) {
  T lanes[8];
  for (int64_t l = 0; l < 8; ++l) lanes[l] = x[0];
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int64_t l = 0; l < 8; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  }
  for (; j < n; ++j) lanes[0] = std::max(lanes[0], x[j]);
  T m = lanes[0];
  for (int64_t l = 1; l < 8; ++l) m = std::max(m, lanes[l]);
  return m;
}

template <class T>
[[gnu::always_inline]] inline T row_sum(const T* x, int64_t n) {
  T lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int64_t l = 0; l < 8; ++l) lanes[l] += x[j + l];
  }
  for (; j < n; ++j) lanes[0] += x[j];
  T sum = 0;
  for (int64_t l = 0; l < 8; ++l) sum += lanes[l];
  return sum;
}

template <class T>
[[gnu::always_inline]] inline T row_dot(const T* x, const T* y, int64_t n) {
  T lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int64_t l = 0; l < 8; ++l) lanes[l] += x[j + l] * y[j + l];
  }
  for (; j < n; ++j) lanes[0] += x[j] * y[j];
  T sum = 0;
  for (int64_t l = 0; l < 8; ++l) sum += lanes[l];
  return sum;
}

// [T, d] rows with a stride -> [d, T]
template <class T>
[[gnu::always_inline]] inline void transpose_rows(const T* rows, int64_t stride, int64_t n,
                                                  int64_t d, T* out) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < d; ++c) out[c * n + j] = rows[j * stride + c];
  }
}

template <class T>
[[gnu::always_inline]] inline void forward_item(const CausalAttentionShape& s, int64_t b, int64_t h,
                                                double scale, const T* q, const T* k, const T* v,
                                                T* out, T* probs, T* scratch) {
  const int64_t n = s.tokens, nk = s.keys(), H = s.heads, G = s.groups, dk = s.key_dim,
                dv = s.value_dim;
  const int64_t g = h / (H / G);
  const T* k0 = k + (b * nk * G + g) * dk;  // key j at k0 + j·G·dk
  const T* v0 = v + (b * nk * G + g) * dv;
  T* keys_t = scratch;  // [dk, nk]
  transpose_rows(k0, G * dk, nk, dk, keys_t);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t seen = s.key_offset + i + 1;  // keys 0..key_offset + i
    const T* qi = q + ((b * n + i) * H + h) * dk;
    T* p = s.keep_probs ? probs + ((b * H + h) * n + i) * nk : probs;  // [seen]
    std::fill(p, p + seen, T(0));
    for (int64_t c = 0; c < dk; ++c) axpy(static_cast<T>(qi[c] * scale), keys_t + c * nk, p, seen);
    const T max = row_max(p, seen);
    for (int64_t j = 0; j < seen; ++j) p[j] = exp_nonpositive(p[j] - max);
    const T inv = T(1) / row_sum(p, seen);
    for (int64_t j = 0; j < seen; ++j) p[j] *= inv;
    T* oi = out + ((b * n + i) * H + h) * dv;
    std::fill(oi, oi + dv, T(0));
    for (int64_t j = 0; j < seen; ++j) axpy(p[j], v0 + j * G * dv, oi, dv);
  }
}

// Group g's first key, value, dk and dv rows of batch b (row j at + j·G·width), with the
// group's dk and dv rows zeroed: each backward item owns its group's rows.
template <class T>
struct GroupRows {
  const T* k0;
  const T* v0;
  T* dk0;
  T* dv0;
};
template <class T>
[[gnu::always_inline]] inline GroupRows<T> group_rows_zeroed(const CausalAttentionShape& s,
                                                             int64_t b, int64_t g, const T* k,
                                                             const T* v, T* dk, T* dv) {
  const int64_t n = s.tokens, G = s.groups, dk_ = s.key_dim, dv_ = s.value_dim;
  const GroupRows<T> rows{k + (b * n * G + g) * dk_, v + (b * n * G + g) * dv_,
                          dk + (b * n * G + g) * dk_, dv + (b * n * G + g) * dv_};
  for (int64_t j = 0; j < n; ++j) {
    std::fill(rows.dk0 + j * G * dk_, rows.dk0 + j * G * dk_ + dk_, T(0));
    std::fill(rows.dv0 + j * G * dv_, rows.dv0 + j * G * dv_ + dv_, T(0));
  }
  return rows;
}

// dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)), dQ = dS·K·scale, dK += dSᵀ·Q·scale, dV += Pᵀ·dO,
// over j ≤ i.
template <class T>
[[gnu::always_inline]] inline void backward_item(const CausalAttentionShape& s, int64_t b,
                                                 int64_t g, double scale, const T* q, const T* k,
                                                 const T* v, const T* probs, const T* dout, T* dq,
                                                 T* dk, T* dv, T* scratch) {
  const int64_t n = s.tokens, H = s.heads, G = s.groups, dk_ = s.key_dim, dv_ = s.value_dim;
  const int64_t per_group = H / G;
  const auto [k0, v0, dk0, dv0] = group_rows_zeroed(s, b, g, k, v, dk, dv);
  T* values_t = scratch;  // [dv, n]
  T* dp = values_t + dv_ * n;
  T* ds = dp + n;
  transpose_rows(v0, G * dv_, n, dv_, values_t);
  for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const T* p = probs + ((b * H + h) * n + i) * n;
      const T* doi = dout + ((b * n + i) * H + h) * dv_;
      const T* qi = q + ((b * n + i) * H + h) * dk_;
      T* dqi = dq + ((b * n + i) * H + h) * dk_;
      std::fill(dp, dp + i + 1, T(0));
      for (int64_t c = 0; c < dv_; ++c) axpy(doi[c], values_t + c * n, dp, i + 1);
      const T row = row_dot(p, dp, i + 1);
      for (int64_t j = 0; j <= i; ++j) ds[j] = static_cast<T>(p[j] * (dp[j] - row) * scale);
      std::fill(dqi, dqi + dk_, T(0));
      for (int64_t j = 0; j <= i; ++j) {
        axpy(ds[j], k0 + j * G * dk_, dqi, dk_);
        axpy(ds[j], qi, dk0 + j * G * dk_, dk_);
        axpy(p[j], doi, dv0 + j * G * dv_, dv_);
      }
    }
  }
}

// f32: the same item by blocks of kQueryBlock query rows, each product one sgemm (oneDNN,
// kernels/gemm) over keys 0..end of the block only, reading q, k, v, dout where the projections
// left them (row strides H·d and G·d). The block's keys past each row's own position are
// computed and then set to probability 0, so every product below reads exact zeros there.
constexpr int64_t kQueryBlock = kCausalQueryBlock;

// probs rows [rows, keys] (row stride n) hold scaled scores; row r may see keys 0..first + r.
inline void softmax_rows(float* p, int64_t n, int64_t first, int64_t rows, int64_t keys) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * n;
    const int64_t seen = first + r + 1;
    const float max = row_max(row, seen);
    for (int64_t j = 0; j < seen; ++j) row[j] = exp_nonpositive(row[j] - max);
    const float inv = 1.0f / row_sum(row, seen);
    for (int64_t j = 0; j < seen; ++j) row[j] *= inv;
    std::fill(row + seen, row + keys, 0.0f);
  }
}

void forward_item_gemm(const CausalAttentionShape& s, int64_t b, int64_t h, double scale,
                       const float* q, const float* k, const float* v, float* out, float* probs) {
  const int64_t n = s.tokens, nk = s.keys(), H = s.heads, G = s.groups, dk = s.key_dim,
                dv = s.value_dim;
  const int64_t g = h / (H / G);
  const float* k0 = k + (b * nk * G + g) * dk;  // key j at k0 + j·G·dk
  const float* v0 = v + (b * nk * G + g) * dv;
  for (int64_t first = 0; first < n; first += kQueryBlock) {
    // the block's rows see keys 0..key_offset + first + r
    const int64_t rows = std::min(kQueryBlock, n - first), keys = s.key_offset + first + rows;
    const float* q_block = q + ((b * n + first) * H + h) * dk;  // [rows, dk], stride H·dk
    // [rows, keys], stride nk
    float* p_block = s.keep_probs ? probs + ((b * H + h) * n + first) * nk : probs;
    float* out_block = out + ((b * n + first) * H + h) * dv;  // [rows, dv], stride H·dv
    sgemm(false, true, rows, keys, dk, static_cast<float>(scale), q_block, H * dk, k0, G * dk, 0.0f,
          p_block, nk);
    softmax_rows(p_block, nk, s.key_offset + first, rows, keys);
    sgemm(false, false, rows, dv, keys, 1.0f, p_block, nk, v0, G * dv, 0.0f, out_block, H * dv);
  }
}

// dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP))·scale, dQ = dS·K, dK += dSᵀ·Q, dV += Pᵀ·dO, each a
// block product; `scratch` holds dS for one block [kQueryBlock, n] (backward_scratch()).
void backward_item_gemm(const CausalAttentionShape& s, int64_t b, int64_t g, double scale,
                        const float* q, const float* k, const float* v, const float* probs,
                        const float* dout, float* dq, float* dk, float* dv, float* scratch) {
  const int64_t n = s.tokens, H = s.heads, G = s.groups, dk_ = s.key_dim, dv_ = s.value_dim;
  const int64_t per_group = H / G;
  const auto [k0, v0, dk0, dv0] = group_rows_zeroed(s, b, g, k, v, dk, dv);
  float* ds = scratch;  // [rows, keys], stride n
  const auto sc = static_cast<float>(scale);
  for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
    for (int64_t first = 0; first < n; first += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, n - first), keys = first + rows;
      const float* p_block = probs + ((b * H + h) * n + first) * n;
      const float* do_block = dout + ((b * n + first) * H + h) * dv_;
      const float* q_block = q + ((b * n + first) * H + h) * dk_;
      float* dq_block = dq + ((b * n + first) * H + h) * dk_;
      sgemm(false, true, rows, keys, dv_, 1.0f, do_block, H * dv_, v0, G * dv_, 0.0f, ds, n);
      for (int64_t r = 0; r < rows; ++r) {
        float* dsr = ds + r * n;
        const float* pr = p_block + r * n;
        const float row = row_dot(pr, dsr, keys);
        for (int64_t j = 0; j < keys; ++j) dsr[j] = pr[j] * (dsr[j] - row) * sc;
      }
      sgemm(false, false, rows, dk_, keys, 1.0f, ds, n, k0, G * dk_, 0.0f, dq_block, H * dk_);
      sgemm(true, false, keys, dk_, rows, 1.0f, ds, n, q_block, H * dk_, 1.0f, dk0, G * dk_);
      sgemm(true, false, keys, dv_, rows, 1.0f, p_block, n, do_block, H * dv_, 1.0f, dv0, G * dv_);
    }
  }
}

}  // namespace

KVLAB_CLONES void causal_attention_forward(const CausalAttentionShape& s, int64_t b, int64_t h,
                                           double scale, const float* q, const float* k,
                                           const float* v, float* out, float* probs, float*) {
  forward_item_gemm(s, b, h, scale, q, k, v, out, probs);
}

KVLAB_CLONES void causal_attention_forward(const CausalAttentionShape& s, int64_t b, int64_t h,
                                           double scale, const double* q, const double* k,
                                           const double* v, double* out, double* probs,
                                           double* scratch) {
  forward_item(s, b, h, scale, q, k, v, out, probs, scratch);
}

KVLAB_CLONES void causal_attention_backward(const CausalAttentionShape& s, int64_t b, int64_t g,
                                            double scale, const float* q, const float* k,
                                            const float* v, const float* probs, const float* dout,
                                            float* dq, float* dk, float* dv, float* scratch) {
  backward_item_gemm(s, b, g, scale, q, k, v, probs, dout, dq, dk, dv, scratch);
}

KVLAB_CLONES void causal_attention_backward(const CausalAttentionShape& s, int64_t b, int64_t g,
                                            double scale, const double* q, const double* k,
                                            const double* v, const double* probs,
                                            const double* dout, double* dq, double* dk, double* dv,
                                            double* scratch) {
  backward_item(s, b, g, scale, q, k, v, probs, dout, dq, dk, dv, scratch);
}

}  // namespace kvlab
