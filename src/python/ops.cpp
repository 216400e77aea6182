// torch.ops.kvlab: the fused causal attention (with its backward), the paged decode attention
// over a cache the caller owns, and cache appends with quantization. Registered with the
// dispatcher when the extension loads, so they work from TorchScript and torch.ops without
// pybind11.
#include <torch/library.h>

#include <optional>
#include <string>

#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "kernels/fast_decoder.h"
#include "kernels/page_layout.h"
#include "nn/causal_attention.h"
#include "spec/dtype.h"
#include "spec/spec_error.h"

namespace kvlab::python {
namespace {

DType cache_dtype_argument(const std::string& text, const char* field) {
  try {
    return parse_dtype(text, field);
  } catch (const SpecError& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  return DType::kF32;  // unreachable
}

void check_cpu_contiguous(const torch::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), name, ": must be on the CPU, got ", t.device());
  TORCH_CHECK_VALUE(t.is_contiguous(), name, ": must be contiguous");
}

// A pool of head rows: [n_pages, n_heads, page_size, row_bytes] uint8 (kernels/page_layout.h).
void check_pool(const torch::Tensor& pool, const char* name, DType dtype, int64_t width) {
  check_cpu_contiguous(pool, name);
  TORCH_CHECK_TYPE(pool.scalar_type() == torch::kUInt8, name,
                   ": must be uint8 (the cache's bytes), got ", pool.scalar_type());
  TORCH_CHECK_VALUE(pool.dim() == 4, name,
                    ": must be [n_pages, n_heads, page_size, row_bytes], got ", pool.sizes());
  const int64_t bytes = row_bytes(dtype, width);
  TORCH_CHECK_VALUE(pool.size(3) == bytes, name, ": rows of ", width, " ", dtype_name(dtype),
                    " values take ", bytes, " bytes, the pool's last dimension is ", pool.size(3));
}

// q [B, T, H, d_k], k [B, T, G, d_k], v [B, T, G, d_v] -> [B, T, H, d_v]
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                    "q, k, v: must be [B, T, heads, width], got ", q.sizes(), ", ", k.sizes(), ", ",
                    v.sizes());
  TORCH_CHECK_TYPE(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
                   "q, k, v: must share a dtype, got ", q.scalar_type(), ", ", k.scalar_type(),
                   ", ", v.scalar_type());
  TORCH_CHECK_TYPE(nn::fused_causal_attention_supports(q),
                   "q: the fused kernel takes float32 or float64 CPU tensors, got ",
                   q.scalar_type(), " on ", q.device());
  TORCH_CHECK_VALUE(k.size(0) == q.size(0) && v.size(0) == q.size(0), "k, v: batch ", k.size(0),
                    ", ", v.size(0), " differs from q's ", q.size(0));
  TORCH_CHECK_VALUE(k.size(1) == q.size(1) && v.size(1) == q.size(1), "k, v: tokens ", k.size(1),
                    ", ", v.size(1), " differ from q's ", q.size(1));
  TORCH_CHECK_VALUE(k.size(2) == v.size(2) && k.size(2) > 0 && q.size(2) % k.size(2) == 0,
                    "k, v: their groups (", k.size(2), ", ", v.size(2),
                    ") must be equal and divide q's heads (", q.size(2), ")");
  TORCH_CHECK_VALUE(k.size(3) == q.size(3), "k: key width ", k.size(3), " differs from q's ",
                    q.size(3));
  TORCH_CHECK_VALUE(std::isfinite(scale) && scale > 0, "scale: must be finite and > 0, got ",
                    scale);
  return nn::fused_causal_attention(q, k, v, scale);
}

// Writes rows [n, n_heads, width] (float32) at slots [n] (int64: page id · page_size + place in
// the page) of pool, each head row stored in `dtype` (quantized per row for q8_0/q4_0/fp8).
void cache_append(const torch::Tensor& pool, const torch::Tensor& rows, const torch::Tensor& slots,
                  const std::string& dtype_text) {
  const DType dtype = cache_dtype_argument(dtype_text, "dtype");
  check_cpu_contiguous(rows, "rows");
  check_cpu_contiguous(slots, "slots");
  TORCH_CHECK_TYPE(rows.scalar_type() == torch::kFloat32, "rows: must be float32, got ",
                   rows.scalar_type());
  TORCH_CHECK_VALUE(rows.dim() == 3, "rows: must be [n, n_heads, width], got ", rows.sizes());
  TORCH_CHECK_TYPE(slots.scalar_type() == torch::kInt64, "slots: must be int64, got ",
                   slots.scalar_type());
  TORCH_CHECK_VALUE(slots.dim() == 1 && slots.size(0) == rows.size(0), "slots: must be [",
                    rows.size(0), "] (one per row), got ", slots.sizes());
  const int64_t n_heads = rows.size(1), width = rows.size(2);
  TORCH_CHECK_VALUE(width > 0, "rows: width must be > 0");
  check_pool(pool, "pool", dtype, width);
  TORCH_CHECK_VALUE(pool.size(1) == n_heads, "pool: ", pool.size(1), " heads, rows have ", n_heads);
  const int64_t page_size = pool.size(2);
  const int64_t n_slots = pool.size(0) * page_size;
  const int64_t bytes = row_bytes(dtype, width);
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    TORCH_CHECK_VALUE(slot[i] >= 0 && slot[i] < n_slots, "slots[", i, "] = ", slot[i],
                      " is outside the pool's ", n_slots, " slots");
  }
  const float* row = rows.data_ptr<float>();
  auto* base = static_cast<std::byte*>(pool.data_ptr());
  for (int64_t i = 0; i < rows.size(0); ++i) {
    for (int64_t h = 0; h < n_heads; ++h) {
      store_rows(row + (i * n_heads + h) * width, 1, width, dtype,
                 base + head_row_offset(slot[i], h, n_heads, page_size, bytes));
    }
  }
}

// One decode step's attention over the paged cache (kernels/decode_attention.h): q [n, H, d_k]
// float32 (rotated, absorbed where the family absorbs) against key_pool [pages, G, page, bytes]
// and value_pool (the same tensor for one-stream layouts), pages as a CSR table of int32
// (FlashInfer's indptr, page_ids, last_page_len) -> [n, H, value_width] float32.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& key_pool,
                               const torch::Tensor& value_pool, const torch::Tensor& indptr,
                               const torch::Tensor& page_ids, const torch::Tensor& last_page_len,
                               int64_t value_width, const std::string& dtype_text, double scale,
                               const c10::optional<torch::Tensor>& q_rope,
                               const c10::optional<torch::Tensor>& rope_pool,
                               const c10::optional<std::string>& rope_dtype_text,
                               const std::string& precision_text) {
  const DType dtype = cache_dtype_argument(dtype_text, "dtype");
  check_cpu_contiguous(q, "q");
  TORCH_CHECK_TYPE(q.scalar_type() == torch::kFloat32, "q: must be float32, got ", q.scalar_type());
  TORCH_CHECK_VALUE(q.dim() == 3 && q.size(1) > 0 && q.size(2) > 0,
                    "q: must be [n_seqs, n_heads, key_width], got ", q.sizes());
  const int64_t n_seqs = q.size(0), n_heads = q.size(1), key_width = q.size(2);
  const bool one_stream = key_pool.is_same(value_pool);
  check_pool(key_pool, "key_pool", dtype, key_width);
  TORCH_CHECK_VALUE(value_width > 0, "value_width: must be > 0");
  if (one_stream) {
    TORCH_CHECK_VALUE(value_width == key_width, "value_width: a one-stream cache's rows are its ",
                      "keys and its values: ", value_width, " differs from the key width ",
                      key_width);
  } else {
    check_pool(value_pool, "value_pool", dtype, value_width);
    TORCH_CHECK_VALUE(value_pool.size(0) == key_pool.size(0) &&
                          value_pool.size(1) == key_pool.size(1) &&
                          value_pool.size(2) == key_pool.size(2),
                      "value_pool: pages, groups and page size must match key_pool's");
  }
  const int64_t n_pages = key_pool.size(0), n_groups = key_pool.size(1);
  const int64_t page_size = key_pool.size(2);
  TORCH_CHECK_VALUE(n_groups > 0 && n_heads % n_groups == 0, "key_pool: its ", n_groups,
                    " groups must divide q's ", n_heads, " heads");
  for (const auto& [t, name] : {std::pair{&indptr, "indptr"}, std::pair{&page_ids, "page_ids"},
                                std::pair{&last_page_len, "last_page_len"}}) {
    check_cpu_contiguous(*t, name);
    TORCH_CHECK_TYPE(t->scalar_type() == torch::kInt32, name, ": must be int32, got ",
                     t->scalar_type());
    TORCH_CHECK_VALUE(t->dim() == 1, name, ": must be one-dimensional, got ", t->sizes());
  }
  TORCH_CHECK_VALUE(indptr.size(0) == n_seqs + 1, "indptr: must have n_seqs + 1 = ", n_seqs + 1,
                    " entries, got ", indptr.size(0));
  TORCH_CHECK_VALUE(last_page_len.size(0) == n_seqs, "last_page_len: must have n_seqs = ", n_seqs,
                    " entries, got ", last_page_len.size(0));
  const int32_t* ptr = indptr.data_ptr<int32_t>();
  const int32_t* ids = page_ids.data_ptr<int32_t>();
  const int32_t* last = last_page_len.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(ptr[0] == 0 && ptr[n_seqs] == page_ids.size(0),
                    "indptr: must start at 0 and end at len(page_ids) = ", page_ids.size(0));
  for (int64_t s = 0; s < n_seqs; ++s) {
    TORCH_CHECK_VALUE(ptr[s + 1] > ptr[s], "indptr: sequence ", s,
                      " has no pages (each needs at least its token's)");
    TORCH_CHECK_VALUE(last[s] >= 1 && last[s] <= page_size, "last_page_len[", s, "] = ", last[s],
                      " must be in 1..", page_size);
  }
  for (int64_t i = 0; i < page_ids.size(0); ++i) {
    TORCH_CHECK_VALUE(ids[i] >= 0 && ids[i] < n_pages, "page_ids[", i, "] = ", ids[i],
                      " is outside the pool's ", n_pages, " pages");
  }
  TORCH_CHECK_VALUE(std::isfinite(scale) && scale > 0, "scale: must be finite and > 0");
  DecodeParams params;
  params.q = q.data_ptr<float>();
  params.key_pool = static_cast<const std::byte*>(key_pool.data_ptr());
  params.value_pool = static_cast<const std::byte*>(value_pool.data_ptr());
  params.pages = {ptr, ids, last, static_cast<int32_t>(page_size)};
  params.n_seqs = n_seqs;
  params.n_heads = n_heads;
  params.n_groups = n_groups;
  params.key_width = key_width;
  params.value_width = value_width;
  params.dtype = dtype;
  params.scale = static_cast<float>(scale);
  TORCH_CHECK_VALUE(q_rope.has_value() == rope_pool.has_value(),
                    "q_rope, rope_pool: a rope stream needs both");
  if (rope_pool) {
    const DType rope_dtype =
        rope_dtype_text ? cache_dtype_argument(*rope_dtype_text, "rope_dtype") : dtype;
    TORCH_CHECK_VALUE(!is_element_dtype(dtype) || rope_dtype == dtype,
                      "rope_dtype: differs from dtype only under q8_0, q4_0 or fp8 caches");
    check_cpu_contiguous(*q_rope, "q_rope");
    TORCH_CHECK_TYPE(q_rope->scalar_type() == torch::kFloat32, "q_rope: must be float32");
    TORCH_CHECK_VALUE(q_rope->dim() == 3 && q_rope->size(0) == n_seqs &&
                          q_rope->size(1) == n_heads && q_rope->size(2) > 0,
                      "q_rope: must be [n_seqs, n_heads, rope_width], got ", q_rope->sizes());
    check_pool(*rope_pool, "rope_pool", rope_dtype, q_rope->size(2));
    TORCH_CHECK_VALUE(
        rope_pool->size(0) == n_pages && rope_pool->size(1) == 1 && rope_pool->size(2) == page_size,
        "rope_pool: must be [", n_pages, ", 1, ", page_size, ", row bytes]");
    params.q_rope = q_rope->data_ptr<float>();
    params.rope_pool = static_cast<const std::byte*>(rope_pool->data_ptr());
    params.rope_width = q_rope->size(2);
    if (rope_dtype != dtype) params.rope_dtype = rope_dtype;
  } else {
    TORCH_CHECK_VALUE(!rope_dtype_text, "rope_dtype: given without a rope stream");
  }
  try {
    params.precision = parse_attn_precision(precision_text, "precision");
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  torch::Tensor out = torch::empty({n_seqs, n_heads, value_width}, q.options());
  params.out = out.data_ptr<float>();
  if (n_seqs == 0) return out;
  try {
    FastDecoder decoder(at::get_num_threads());
    decoder.run(params);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  return out;
}

// The size of a pool's last dimension: the bytes of one head row of `width` values.
int64_t cache_row_bytes(const std::string& dtype, int64_t width) {
  TORCH_CHECK_VALUE(width > 0, "width: must be > 0");
  return row_bytes(cache_dtype_argument(dtype, "dtype"), width);
}

}  // namespace

TORCH_LIBRARY(kvlab, m) {
  m.def("causal_attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor", &causal_attention);
  m.def("cache_append(Tensor(a!) pool, Tensor rows, Tensor slots, str dtype) -> ()", &cache_append);
  m.def(
      "decode_attention(Tensor q, Tensor key_pool, Tensor value_pool, Tensor indptr, "
      "Tensor page_ids, Tensor last_page_len, int value_width, str dtype, float scale, "
      "Tensor? q_rope=None, Tensor? rope_pool=None, str? rope_dtype=None, "
      "str precision=\"f32\") -> Tensor",
      &decode_attention);
  m.def("cache_row_bytes(str dtype, int width) -> int", &cache_row_bytes);
}

}  // namespace kvlab::python
