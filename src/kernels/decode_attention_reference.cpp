#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "kernels/page_layout.h"
#include "kernels/rope.h"

namespace kvlab {
namespace {

void require(bool ok, const char* field, const char* rule) {
  if (!ok) throw std::invalid_argument(std::string("decode params: ") + field + ": " + rule);
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Output row of one head with kBf16 weights: the work items' online softmax, block by block,
// each weight rounded to bf16 relative to the item's running maximum, then the items merged.
void bf16_weighted_values(const std::vector<double>& scores, float scale, int64_t value_width,
                          const std::function<float(int64_t, int64_t)>& value, float* out) {
  const int64_t tokens = static_cast<int64_t>(scores.size());
  std::vector<double> item_max, item_sum, item_acc;  // per item; acc: [item][value_width]
  for (int64_t t0 = 0; t0 < tokens; t0 += kDecodeChunkTokens) {
    const int64_t t1 = std::min(tokens, t0 + kDecodeChunkTokens);
    float m = -INFINITY;
    double l = 0;
    std::vector<double> acc(static_cast<size_t>(value_width), 0.0);
    for (int64_t b0 = t0; b0 < t1; b0 += kDecodeBlockTokens) {
      const int64_t b1 = std::min(t1, b0 + kDecodeBlockTokens);
      float m_new = m;
      for (int64_t j = b0; j < b1; ++j) {
        m_new = std::max(m_new, static_cast<float>(scores[static_cast<size_t>(j)]) * scale);
      }
      const double alpha = std::exp(static_cast<double>(m) - m_new);  // 0 on the first block
      l *= alpha;
      for (double& a : acc) a *= alpha;
      for (int64_t j = b0; j < b1; ++j) {
        const float s = static_cast<float>(scores[static_cast<size_t>(j)]) * scale;
        const double w = round_bf16(std::exp(s - m_new));
        l += w;
        for (int64_t i = 0; i < value_width; ++i) acc[static_cast<size_t>(i)] += w * value(j, i);
      }
      m = m_new;
    }
    item_max.push_back(m);
    item_sum.push_back(l);
    item_acc.insert(item_acc.end(), acc.begin(), acc.end());
  }
  double m = -INFINITY, l = 0;
  for (double x : item_max) m = std::max(m, x);
  for (int64_t i = 0; i < value_width; ++i) out[i] = 0.0f;
  std::vector<double> acc(static_cast<size_t>(value_width), 0.0);
  for (size_t c = 0; c < item_max.size(); ++c) {
    const double w = std::exp(item_max[c] - m);
    l += w * item_sum[c];
    for (int64_t i = 0; i < value_width; ++i) {
      acc[static_cast<size_t>(i)] += w * item_acc[c * static_cast<size_t>(value_width) + i];
    }
  }
  for (int64_t i = 0; i < value_width && tokens > 0; ++i) {
    out[i] = static_cast<float>(acc[static_cast<size_t>(i)] / l);
  }
}

// Group g's key row of the token at `slot`, as f32 (either key order).
void load_key_row(const DecodeParams& p, int64_t slot, int64_t g, float* out) {
  const int64_t page = p.pages.page_size;
  const int64_t key_row = row_bytes(p.dtype, p.key_width);
  if (p.key_order == KeyOrder::kRows) {
    load_rows(p.key_pool + head_row_offset(slot, g, p.n_groups, page, key_row), 1, p.key_width,
              p.dtype, out);
    return;
  }
  const std::byte* block =
      p.key_pool + page_row_offset(slot / page, 0, g, p.n_groups, page, key_row);
  for (int64_t e = 0; e < p.key_width; ++e) {
    uint16_t bits = 0;
    std::memcpy(&bits, block + pair_element_offset(slot % page, e, page), sizeof bits);
    out[e] = bf16_to_f32(bits);
  }
}

}  // namespace

AttnPrecision effective_precision(const DecodeParams& p) {
  switch (p.precision) {
    case AttnPrecision::kBf16:
      return p.dtype == DType::kBf16 && p.key_maps == nullptr ? p.precision : AttnPrecision::kF32;
    case AttnPrecision::kInt8: {
      const bool blocks = p.dtype == DType::kQ8_0 || p.dtype == DType::kQ4_0;
      return blocks && p.key_maps == nullptr && !p.rope_on_read ? p.precision : AttnPrecision::kF32;
    }
    case AttnPrecision::kF32:
      break;
  }
  return AttnPrecision::kF32;
}

const char* attn_precision_name(AttnPrecision precision) {
  switch (precision) {
    case AttnPrecision::kBf16:
      return "bf16";
    case AttnPrecision::kInt8:
      return "int8";
    case AttnPrecision::kF32:
      break;
  }
  return "f32";
}

AttnPrecision parse_attn_precision(const std::string& text, const char* field) {
  if (text == "f32") return AttnPrecision::kF32;
  if (text == "bf16") return AttnPrecision::kBf16;
  if (text == "int8") return AttnPrecision::kInt8;
  throw std::invalid_argument(std::string(field) + ": \"" + text.substr(0, 40) +
                              "\" is not a precision: expected f32, bf16 or int8");
}

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
  require(!is_element_dtype(p.dtype) || rope_pool_dtype(p) == p.dtype, "rope_dtype",
          "differs from dtype only under q8_0, q4_0 or fp8 caches");
  require(p.key_maps == nullptr || (p.rope_on_read && p.norm_weight == nullptr &&
                                    p.rope_width == 0 && p.key_pool == p.value_pool),
          "key_maps", "rebuilt keys need one stream, RoPE on read, no norm and no rope stream");
  if (p.key_order == KeyOrder::kTokenPairs) {
    require(p.dtype == DType::kBf16, "key_order", "pairs needs a bf16 cache");
    require(
        p.key_pool != p.value_pool && !p.rope_on_read && p.key_maps == nullptr && p.rope_width == 0,
        "key_order",
        "pairs applies to two-stream caches (no rope stream; keys not rotated or rebuilt on "
        "read)");
    require(p.pages.page_size % kDecodeBlockTokens == 0, "key_order",
            "pairs needs a page size that is a multiple of 16 tokens");
    require(p.key_width % 2 == 0, "key_order", "pairs needs an even key width");
  }
}

void decode_attention_reference(const DecodeParams& p) {
  validate_decode_params(p);
  const int64_t per_group = p.n_heads / p.n_groups;
  const int64_t page = p.pages.page_size;
  const bool bf16 = effective_precision(p) == AttnPrecision::kBf16;
  const bool int8 = effective_precision(p) == AttnPrecision::kInt8;
  const DType rope_dtype = rope_pool_dtype(p);
  // a cached row of every dtype is read the one way: dequantized to f32 whole
  const int64_t value_row = row_bytes(p.dtype, p.value_width);
  const int64_t rope_row = row_bytes(rope_dtype, p.rope_width);
  std::vector<float> key(static_cast<size_t>(p.key_width));
  std::vector<float> keys, values, ropes;  // the group's rows: [tokens][width]
  for (int64_t b = 0; b < p.n_seqs; ++b) {
    const int32_t first = p.pages.indptr[b], last = p.pages.indptr[b + 1];
    const int64_t tokens = last == first ? 0 : (last - first - 1) * page + p.pages.last_page_len[b];
    auto slot = [&](int64_t j) { return p.pages.page_ids[first + j / page] * page + j % page; };
    ropes.resize(static_cast<size_t>(tokens * p.rope_width));
    for (int64_t j = 0; j < tokens && p.rope_width > 0; ++j) {
      load_rows(p.rope_pool + slot(j) * rope_row, 1, p.rope_width, rope_dtype,
                ropes.data() + j * p.rope_width);
    }
    for (int64_t g = 0; g < p.n_groups; ++g) {
      keys.resize(static_cast<size_t>(tokens * p.key_width));
      values.resize(static_cast<size_t>(tokens * p.value_width));
      for (int64_t j = 0; j < tokens; ++j) {
        load_rows(p.value_pool + head_row_offset(slot(j), g, p.n_groups, page, value_row), 1,
                  p.value_width, p.dtype, values.data() + j * p.value_width);
        if (p.key_maps == nullptr) load_key_row(p, slot(j), g, keys.data() + j * p.key_width);
      }
      for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
        std::vector<float> q(p.q + (b * p.n_heads + h) * p.key_width,
                             p.q + (b * p.n_heads + h + 1) * p.key_width);
        std::vector<float> qr;
        if (p.q_rope != nullptr) {
          qr.assign(p.q_rope + (b * p.n_heads + h) * p.rope_width,
                    p.q_rope + (b * p.n_heads + h + 1) * p.rope_width);
        }
        if (bf16) {
          for (float& x : q) x = round_bf16(x);
          for (float& x : qr) x = round_bf16(x);
        }
        if (int8) {  // the query as the q8_0 blocks the kernel's integer dot products read
          std::vector<std::byte> blocks(static_cast<size_t>(row_bytes(DType::kQ8_0, p.key_width)));
          store_rows(q.data(), 1, p.key_width, DType::kQ8_0, blocks.data());
          load_rows(blocks.data(), 1, p.key_width, DType::kQ8_0, q.data());
        }
        std::vector<double> scores(static_cast<size_t>(tokens));
        for (int64_t j = 0; j < tokens; ++j) {
          const float* v_row = values.data() + j * p.value_width;
          if (p.key_maps != nullptr) {  // k = v M_h
            const float* m = p.key_maps + h * p.value_width * p.key_width;
            for (int64_t n = 0; n < p.key_width; ++n) {
              double k = 0;
              for (int64_t d = 0; d < p.value_width; ++d)
                k += static_cast<double>(v_row[d]) * m[d * p.key_width + n];
              key[static_cast<size_t>(n)] = static_cast<float>(k);
            }
          } else {
            std::copy_n(keys.data() + j * p.key_width, p.key_width, key.data());
          }
          if (p.rope_on_read) {
            if (p.norm_weight != nullptr) {
              double ss = 0;
              for (float x : key) ss += static_cast<double>(x) * x;
              const double inv =
                  1.0 / std::sqrt(ss / static_cast<double>(p.key_width) + p.norm_eps);
              for (int64_t i = 0; i < p.key_width; ++i) {
                key[static_cast<size_t>(i)] =
                    static_cast<float>(key[static_cast<size_t>(i)] * inv) * p.norm_weight[i];
              }
            }
            const int64_t half = p.key_width / 2;
            const double a = p.rope_scaling.attention_factor;
            for (int64_t i = 0; i < half; ++i) {
              const double angle = static_cast<double>(j) *
                                   rope_frequency(i, p.key_width, p.rope_theta, p.rope_scaling);
              const double cos = a * std::cos(angle), sin = a * std::sin(angle);
              const double x1 = key[static_cast<size_t>(i)];
              const double x2 = key[static_cast<size_t>(i + half)];
              key[static_cast<size_t>(i)] = static_cast<float>(x1 * cos - x2 * sin);
              key[static_cast<size_t>(i + half)] = static_cast<float>(x2 * cos + x1 * sin);
            }
          }
          if (bf16 && p.rope_on_read) {  // the rotated key, rounded as the kernel rounds it
            for (float& x : key) x = round_bf16(x);
          }
          double dot = 0;
          for (int64_t i = 0; i < p.key_width; ++i)
            dot += static_cast<double>(q[i]) * key[static_cast<size_t>(i)];
          for (int64_t i = 0; i < static_cast<int64_t>(qr.size()); ++i)
            dot += static_cast<double>(qr[i]) * ropes[static_cast<size_t>(j * p.rope_width + i)];
          scores[static_cast<size_t>(j)] = bf16 ? dot : dot * p.scale;
        }
        float* out = p.out + (b * p.n_heads + h) * p.value_width;
        auto value = [&](int64_t j, int64_t i) {
          return values[static_cast<size_t>(j * p.value_width + i)];
        };
        if (bf16) {
          bf16_weighted_values(scores, p.scale, p.value_width, value, out);
          continue;
        }
        double max = -INFINITY;
        for (double s : scores) max = std::max(max, s);
        double sum = 0;
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int64_t i = 0; i < p.value_width; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < tokens; ++j) acc += scores[static_cast<size_t>(j)] * value(j, i);
          out[i] = tokens == 0 ? 0.0f : static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace kvlab
