#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/decode_attention.h"

namespace kvlab {
namespace {

void require(bool ok, const char* field, const char* rule) {
  if (!ok) throw std::invalid_argument(std::string("decode params: ") + field + ": " + rule);
}

}  // namespace

void validate_decode_params(const DecodeParams& p) {
  require(p.q != nullptr && p.out != nullptr, "q/out", "must be set");
  require(p.key_pool != nullptr && p.value_pool != nullptr, "key_pool/value_pool", "must be set");
  require(p.pages.indptr && p.pages.page_ids && p.pages.last_page_len, "pages", "must be set");
  require(p.pages.page_size > 0, "pages.page_size", "must be > 0");
  require(p.n_seqs >= 0 && p.n_heads > 0 && p.n_groups > 0, "n_seqs/n_heads/n_groups", "> 0");
  require(p.n_heads % p.n_groups == 0, "n_groups", "must divide n_heads");
  require(p.key_width > 0 && p.value_width > 0, "key_width/value_width", "must be > 0");
  require((p.rope_width > 0) == (p.rope_pool != nullptr && p.q_rope != nullptr), "rope_width",
          "a rope stream needs rope_pool, q_rope and rope_width > 0 together");
  require(!p.rope_on_read || p.key_pool == p.value_pool, "rope_on_read", "one-stream only");
  require(!p.rope_on_read || p.key_width % 2 == 0, "key_width", "RoPE needs an even width");
  require(p.dtype != DType::kFp8, "dtype", "fp8 caches are counted, not decoded");
  require(p.key_maps == nullptr || (p.rope_on_read && p.norm_weight == nullptr &&
                                    p.rope_width == 0 && p.key_pool == p.value_pool),
          "key_maps", "rebuilt keys need one stream, RoPE on read, no norm and no rope stream");
}

void decode_attention_reference(const DecodeParams& p) {
  validate_decode_params(p);
  const int64_t elem = dtype_bytes(p.dtype);
  const int64_t per_group = p.n_heads / p.n_groups;
  const int64_t page = p.pages.page_size;
  std::vector<float> key(static_cast<size_t>(p.key_width));
  for (int64_t b = 0; b < p.n_seqs; ++b) {
    const int32_t first = p.pages.indptr[b], last = p.pages.indptr[b + 1];
    const int64_t tokens = last == first ? 0 : (last - first - 1) * page + p.pages.last_page_len[b];
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const int64_t g = h / per_group;
      const float* q = p.q + (b * p.n_heads + h) * p.key_width;
      const float* qr = p.q_rope ? p.q_rope + (b * p.n_heads + h) * p.rope_width : nullptr;
      std::vector<double> scores(static_cast<size_t>(tokens));
      for (int64_t j = 0; j < tokens; ++j) {
        const int64_t slot = p.pages.page_ids[first + j / page] * page + j % page;
        if (p.key_maps != nullptr) {  // k = v M_h
          const std::byte* v_row = p.value_pool + ((slot * p.n_groups + g) * p.value_width) * elem;
          const float* m = p.key_maps + h * p.value_width * p.key_width;
          for (int64_t n = 0; n < p.key_width; ++n) {
            double k = 0;
            for (int64_t d = 0; d < p.value_width; ++d)
              k += static_cast<double>(load_element(v_row, p.dtype, d)) * m[d * p.key_width + n];
            key[static_cast<size_t>(n)] = static_cast<float>(k);
          }
        } else {
          const std::byte* k_row = p.key_pool + ((slot * p.n_groups + g) * p.key_width) * elem;
          for (int64_t i = 0; i < p.key_width; ++i)
            key[static_cast<size_t>(i)] = load_element(k_row, p.dtype, i);
        }
        if (p.rope_on_read) {
          if (p.norm_weight != nullptr) {
            double ss = 0;
            for (float x : key) ss += static_cast<double>(x) * x;
            const double inv = 1.0 / std::sqrt(ss / static_cast<double>(p.key_width) + p.norm_eps);
            for (int64_t i = 0; i < p.key_width; ++i) {
              key[static_cast<size_t>(i)] =
                  static_cast<float>(key[static_cast<size_t>(i)] * inv) * p.norm_weight[i];
            }
          }
          const int64_t half = p.key_width / 2;
          for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(j) *
                                 std::pow(p.rope_theta, -2.0 * static_cast<double>(i) /
                                                            static_cast<double>(p.key_width));
            const double x1 = key[static_cast<size_t>(i)], x2 = key[static_cast<size_t>(i + half)];
            key[static_cast<size_t>(i)] =
                static_cast<float>(x1 * std::cos(angle) - x2 * std::sin(angle));
            key[static_cast<size_t>(i + half)] =
                static_cast<float>(x2 * std::cos(angle) + x1 * std::sin(angle));
          }
        }
        double dot = 0;
        for (int64_t i = 0; i < p.key_width; ++i)
          dot += static_cast<double>(q[i]) * key[static_cast<size_t>(i)];
        if (qr != nullptr) {
          const std::byte* r_row = p.rope_pool + slot * p.rope_width * elem;
          for (int64_t i = 0; i < p.rope_width; ++i)
            dot += static_cast<double>(qr[i]) * load_element(r_row, p.dtype, i);
        }
        scores[static_cast<size_t>(j)] = dot * p.scale;
      }
      double max = -INFINITY;
      for (double s : scores) max = std::max(max, s);
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - max));
      float* out = p.out + (b * p.n_heads + h) * p.value_width;
      for (int64_t i = 0; i < p.value_width; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < tokens; ++j) {
          const int64_t slot = p.pages.page_ids[first + j / page] * page + j % page;
          const std::byte* v_row = p.value_pool + ((slot * p.n_groups + g) * p.value_width) * elem;
          acc += scores[static_cast<size_t>(j)] * load_element(v_row, p.dtype, i);
        }
        out[i] = tokens == 0 ? 0.0f : static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace kvlab
