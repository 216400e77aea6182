#include "kernels/fast_decoder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/gemm.h"
#include "kernels/prefill_attention.h"
#include "kernels/rope.h"
#include "kernels/target_clones.h"

namespace kvlab {
namespace {

// arch_prctl(2): ask for the AMX tile data state
constexpr int kArchRequestXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

}  // namespace

bool cpu_supports(CpuIsa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case CpuIsa::kAmx:
      // Linux hands out tile state only on request (once per process; asking again is free)
      return cpu_supports(CpuIsa::kAvx512) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-bf16") &&
             syscall(SYS_arch_prctl, kArchRequestXcompPerm, kXfeatureXtiledata) == 0;
  }
  return false;
}

CpuIsa detect_cpu_isa() {
  const char* forced = std::getenv("KVLAB_CPU_ISA");
  const std::string cap = forced == nullptr ? "" : forced;
  if (!cap.empty() && cap != "scalar" && cap != "avx2" && cap != "avx512") {
    throw std::invalid_argument("KVLAB_CPU_ISA=" + cap +
                                ": expected scalar, avx2 or avx512 (or unset: the best this "
                                "machine runs)");
  }
  if (cap == "scalar") return CpuIsa::kScalar;
  if (cap != "avx2" && cap != "avx512" && cpu_supports(CpuIsa::kAmx)) return CpuIsa::kAmx;
  if (cap != "avx2" && cpu_supports(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  return cpu_supports(CpuIsa::kAvx2) ? CpuIsa::kAvx2 : CpuIsa::kScalar;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAmx:
      return "avx512+amx";
    case CpuIsa::kScalar:
      break;
  }
  return "scalar";
}

DecodePlan plan_decode(const DecodeParams& p, DecodeWorkspace& work, int64_t chunk_tokens,
                       int64_t fixed_floats, int64_t floats_per_item) {
  // capacities are kept: no allocation once the workspace has grown to the batch
  work.tokens.resize(static_cast<size_t>(p.n_seqs));
  work.item_start.assign(static_cast<size_t>(p.n_seqs) + 1, 0);
  work.item_seq.clear();
  int64_t split_seqs = 0;
  for (int64_t b = 0; b < p.n_seqs; ++b) {
    const int32_t first = p.pages.indptr[b], last = p.pages.indptr[b + 1];
    const int64_t t =
        last == first ? 0 : (last - first - 1) * p.pages.page_size + p.pages.last_page_len[b];
    work.tokens[static_cast<size_t>(b)] = t;
    const int64_t chunks = std::max<int64_t>(1, (t + chunk_tokens - 1) / chunk_tokens);
    work.item_start[static_cast<size_t>(b) + 1] = work.item_start[static_cast<size_t>(b)] + chunks;
    work.item_seq.insert(work.item_seq.end(), static_cast<size_t>(chunks), b);
    split_seqs += chunks > 1 ? 1 : 0;
  }
  constexpr int64_t kLineFloats = 16, kPageFloats = 1024;
  DecodePlan plan;
  plan.n_items = work.item_start.back();
  plan.split_seqs = split_seqs;
  plan.item_stride = (floats_per_item + kPageFloats - 1) / kPageFloats * kPageFloats;
  const int64_t fixed = (fixed_floats + kLineFloats - 1) / kLineFloats * kLineFloats;
  // room to align the start to a line and the items to a page
  const int64_t need = kLineFloats + fixed + kPageFloats + plan.n_items * plan.item_stride;
  if (static_cast<int64_t>(work.floats.size()) < need)
    work.floats.resize(static_cast<size_t>(need));
  plan.tokens = work.tokens.data();
  plan.item_start = work.item_start.data();
  plan.item_seq = work.item_seq.data();
  auto align = [](float* at, int64_t floats) {
    const uintptr_t bytes = static_cast<uintptr_t>(floats) * sizeof(float);
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(at) + bytes - 1) / bytes * bytes);
  };
  plan.floats = align(work.floats.data(), kLineFloats);
  plan.items = align(plan.floats + fixed, kPageFloats);
  return plan;
}

namespace {

constexpr int64_t kMergeHeads = 8;  // heads a merge task

// params.out of sequence b's heads [h0, h0 + kMergeHeads) (fewer at the end) from its items'
// partials
KVLAB_CLONES void merge_heads(const DecodeParams& p, const DecodePlan& plan, int64_t b,
                              int64_t h0) {
  const int64_t H = p.n_heads, vw = p.value_width, stride = 2 + vw;
  const int64_t heads = std::min(kMergeHeads, H - h0);
  const int64_t first = plan.item_start[b], items = plan.items_of(b);
  float* out = p.out + (b * H + h0) * vw;  // [heads][vw]
  for (int64_t i = 0; i < heads * vw; ++i) out[i] = 0.0f;
  if (plan.tokens[b] == 0) return;
  float m[kMergeHeads], l[kMergeHeads];
  for (int64_t hh = 0; hh < heads; ++hh) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
  }
  for (int64_t k = 0; k < items; ++k) {
    const float* part = plan.item(first + k) + h0 * stride;
    for (int64_t hh = 0; hh < heads; ++hh) m[hh] = std::max(m[hh], part[hh * stride]);
  }
  for (int64_t k = 0; k < items; ++k) {
    const float* part = plan.item(first + k) + h0 * stride;
    for (int64_t hh = 0; hh < heads; ++hh) {
      const float* ph = part + hh * stride;
      if (ph[1] == 0.0f) continue;
      const float w = std::exp(ph[0] - m[hh]);
      l[hh] += ph[1] * w;
      float* o = out + hh * vw;
      for (int64_t i = 0; i < vw; ++i) o[i] += w * ph[2 + i];
    }
  }
  for (int64_t hh = 0; hh < heads; ++hh) {
    const float inverse = 1.0f / l[hh];
    float* o = out + hh * vw;
    for (int64_t i = 0; i < vw; ++i) o[i] *= inverse;
  }
}

bool lone_item(const DecodePlan& plan, int64_t b) { return plan.items_of(b) == 1; }

}  // namespace

void merge_partials(const DecodeParams& p, const DecodePlan& plan, ThreadPool& pool) {
  if (plan.split_seqs == 0) return;
  const int64_t head_blocks = (p.n_heads + kMergeHeads - 1) / kMergeHeads;
  pool.parallel_for(p.n_seqs * head_blocks, [&](int64_t task) {
    const int64_t b = task / head_blocks;
    if (!lone_item(plan, b)) merge_heads(p, plan, b, task % head_blocks * kMergeHeads);
  });
}

void merge_lone_item(const DecodeParams& p, const DecodePlan& plan, int64_t item) {
  const int64_t b = plan.item_seq[item];
  if (!lone_item(plan, b)) return;
  for (int64_t h0 = 0; h0 < p.n_heads; h0 += kMergeHeads) merge_heads(p, plan, b, h0);
}

bool cpu_has_avx512_bf16() {
  return cpu_supports(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512bf16");
}

bool cpu_has_avx512_vnni() {
  return cpu_supports(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512vnni");
}

DType default_weight_dtype(CpuIsa isa) {
  return isa == CpuIsa::kScalar ? DType::kF32 : DType::kBf16;
}

bool cpu_has_amx_int8() {
  // no tile-permission request here: it is a system call, and fastest_weight_order (which asks
  // this for every product) is only asked about AMX where the permission came with the ISA
  return cpu_supports(CpuIsa::kAvx512) && __builtin_cpu_supports("amx-tile") &&
         __builtin_cpu_supports("amx-int8");
}

WeightOrder fastest_weight_order(DType dtype, CpuIsa isa) {
  const bool avx512 = isa == CpuIsa::kAvx512 || isa == CpuIsa::kAmx;
  // q8_0 and q4_0: the VNNI kernel's panels, or without VNNI the AVX2 kernel's
  if (takes_quant_panels(dtype) && isa != CpuIsa::kScalar) return WeightOrder::kPanels;
  if (dtype == DType::kBf16 && avx512 && cpu_has_avx512_bf16()) return WeightOrder::kPanels;
  if (takes_float_panels(dtype) && avx512) return WeightOrder::kPanels;
  if ((takes_float_panels(dtype) || dtype == DType::kBf16) && isa == CpuIsa::kAvx2) {
    return WeightOrder::kPanels;
  }
  return WeightOrder::kRows;
}

KeyOrder fastest_key_order(const CacheLayout& layout, CpuIsa isa) {
  return layout.takes_key_pairs() && isa != CpuIsa::kAmx ? KeyOrder::kTokenPairs : KeyOrder::kRows;
}

bool FastDecoder::supports_bf16_precision() const {
  return isa_ == CpuIsa::kScalar ||
         ((isa_ == CpuIsa::kAvx512 || isa_ == CpuIsa::kAmx) && cpu_has_avx512_bf16());
}

FastDecoder::FastDecoder(int threads, CpuIsa isa) : isa_(isa), pool_(threads) {
  // a level the CPU (or, for AMX, the kernel) refuses would end in SIGILL at the first step
  if (!cpu_supports(isa)) {
    throw std::invalid_argument("FastDecoder: this machine cannot run the " +
                                std::string(cpu_isa_name(isa)) + " kernels");
  }
}

void FastDecoder::run(const LinearStepParams& params) {
  if (isa_ == CpuIsa::kScalar) {
    linear_step_reference(params);
  } else {
    linear_step_avx2(params, pool_);
  }
}

void FastDecoder::run(const MatVecParams& params) { run(&params, 1); }

void FastDecoder::run(const MatVecParams* products, int64_t count) {
  require_shared_x(products, count, "decoder");
  const MatVecParams& params = products[0];  // every product's dtype, order and rows of x
  const auto each = [&](auto&& kernel) {
    for (int64_t i = 0; i < count; ++i) kernel(products[i]);
  };
  if (params.weight_order != WeightOrder::kRows) {
    if (fastest_weight_order(params.weight_dtype, isa_) != params.weight_order) {
      each([](const MatVecParams& p) { matvec_reference(p); });
    } else if (takes_quant_panels(params.weight_dtype)) {
      const int64_t tile_rows = quant_tile_min_rows(params.weight_dtype, isa_);
      if (!matvec_runs_avx512(params.weight_dtype)) {
        matvec_avx2_quant_panels(products, count, pool_, matvec_scratch_);
      } else if (matvec_expands_quant_panels(params)) {
        matvec_amx_expanded_panels(products, count, pool_, matvec_scratch_);
      } else if (tile_rows > 0 && params.n >= tile_rows) {
        matvec_amx_quant_panels(products, count, pool_, matvec_scratch_);
      } else {
        matvec_quant_panels(products, count, pool_, matvec_scratch_);
      }
    } else if (isa_ == CpuIsa::kAvx2) {
      matvec_avx2_panels(products, count, pool_, matvec_scratch_);
    } else if (takes_float_panels(params.weight_dtype)) {
      matvec_float_panels(products, count, pool_, matvec_scratch_);
    } else if (isa_ == CpuIsa::kAmx && params.n >= kAmxPanelMinRows) {
      matvec_amx_bf16_panels(products, count, pool_, matvec_scratch_);
    } else {
      matvec_bf16_panels(products, count, pool_, matvec_scratch_);
    }
  } else if (isa_ == CpuIsa::kScalar) {
    each([](const MatVecParams& p) { matvec_reference(p); });
  } else if (matvec_runs_f32_gemm(params)) {
    each([](const MatVecParams& p) { matvec_gemm_f32(p); });
  } else if (matvec_runs_bf16_products(params)) {
    if (isa_ == CpuIsa::kAmx && params.n >= kBf16GemmMinRows) {
      each([&](const MatVecParams& p) { matvec_gemm_bf16(p, matvec_scratch_); });
    } else {
      each([&](const MatVecParams& p) { matvec_bf16_products(p, pool_, matvec_scratch_); });
    }
  } else if (matvec_runs_avx512(params.weight_dtype)) {
    each([&](const MatVecParams& p) { matvec_avx512(p, pool_, matvec_scratch_); });
  } else {
    each([&](const MatVecParams& p) { matvec_avx2(p, pool_, matvec_scratch_); });
  }
}

bool FastDecoder::matvec_runs_f32_gemm(const MatVecParams& params) const {
  return isa_ != CpuIsa::kScalar && params.weight_order == WeightOrder::kRows &&
         params.weight_dtype == DType::kF32 && params.n >= kF32GemmMinRows;
}

bool FastDecoder::matvec_runs_bf16_products(const MatVecParams& params) const {
  if (params.weight_order != WeightOrder::kRows &&
      fastest_weight_order(params.weight_dtype, isa_) != params.weight_order) {
    return false;  // the reference, which keeps x in f32
  }
  const int64_t min_rows = bf16_product_min_rows(isa_);
  return params.weight_dtype == DType::kBf16 && min_rows > 0 && params.n >= min_rows;
}

int64_t bf16_product_min_rows(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
    case CpuIsa::kAvx2:
      return 0;
    case CpuIsa::kAvx512:
      return cpu_has_avx512_bf16() ? kBf16ProductMinRows : 0;
    case CpuIsa::kAmx:
      if (cpu_has_avx512_bf16()) return kBf16ProductMinRows;
      return bf16_gemm_native() ? kBf16GemmMinRows : 0;
  }
  return 0;
}

int64_t quant_tile_min_rows(DType dtype, CpuIsa isa) {
  if (isa != CpuIsa::kAmx || !cpu_has_amx_int8() ||
      fastest_weight_order(dtype, isa) != WeightOrder::kPanels) {
    return 0;
  }
  return dtype == DType::kQ8_0   ? kAmxQ8PanelMinRows
         : dtype == DType::kQ4_0 ? kAmxQ4PanelMinRows
                                 : 0;
}

int64_t quant_expand_min_rows(DType dtype, CpuIsa isa) {
  if (quant_tile_min_rows(dtype, isa) == 0 || !cpu_has_avx512_bf16()) return 0;
  return dtype == DType::kQ8_0 ? kAmxExpandedQ8MinRows : kAmxExpandedQ4MinRows;
}

bool FastDecoder::matvec_expands_quant_panels(const MatVecParams& params) const {
  const int64_t min_rows = quant_expand_min_rows(params.weight_dtype, isa_);
  return params.weight_order == WeightOrder::kPanels && min_rows > 0 && params.n >= min_rows;
}

bool FastDecoder::matvec_runs_avx512(DType weight_dtype) const {
  return (isa_ == CpuIsa::kAvx512 || isa_ == CpuIsa::kAmx) &&
         (is_element_dtype(weight_dtype) || cpu_has_avx512_vnni());
}

void FastDecoder::prepare_rope(int64_t tokens, int64_t width, double theta,
                               const RopeScaling& scaling) {
  if (width != rope_width_ || theta != rope_theta_ || scaling != rope_scaling_) rope_positions_ = 0;
  if (tokens <= rope_positions_) return;
  const int64_t positions = std::max<int64_t>(tokens, 2 * rope_positions_);
  HugePageFloats table(positions * width);
  std::copy(rope_table_.data(), rope_table_.data() + rope_positions_ * width, table.data());
  for (int64_t j = rope_positions_; j < positions; ++j) {
    rope_row(j, width, theta, scaling, table.data() + j * width);
  }
  rope_table_ = std::move(table);
  rope_positions_ = positions;
  rope_width_ = width;
  rope_theta_ = theta;
  rope_scaling_ = scaling;
}

bool FastDecoder::runs_simd(const DecodeParams& params) const {
  return isa_ != CpuIsa::kScalar &&
         (is_element_dtype(params.dtype) || effective_precision(params) == AttnPrecision::kInt8);
}

PrefillPath prefill_path(CpuIsa isa) {
  if (isa != CpuIsa::kAvx512 && isa != CpuIsa::kAmx) return PrefillPath::kAvx2;
  if (!cpu_has_avx512_bf16()) return PrefillPath::kAvx512;
  return isa == CpuIsa::kAmx ? PrefillPath::kAmx : PrefillPath::kAvx512Bf16;
}

namespace {

// Rows [first, last) of a decode call as a call of their own.
DecodeParams rows_of(const DecodeParams& p, int64_t first, int64_t last) {
  DecodeParams rows = p;
  rows.q = p.q + first * p.n_heads * p.key_width;
  if (p.q_rope != nullptr) rows.q_rope = p.q_rope + first * p.n_heads * p.rope_width;
  rows.out = p.out + first * p.n_heads * p.value_width;
  rows.pages.indptr = p.pages.indptr + first;
  rows.pages.last_page_len = p.pages.last_page_len + first;
  rows.n_seqs = last - first;
  return rows;
}

}  // namespace

void FastDecoder::run(const DecodeParams& params) {
  if (!runs_simd(params)) {
    decode_attention_reference(params);
    return;
  }
  if (params.rope_on_read) {
    int64_t tokens = 0;
    for (int64_t b = 0; b < params.n_seqs; ++b) {
      const int64_t pages = params.pages.indptr[b + 1] - params.pages.indptr[b];
      tokens = std::max<int64_t>(tokens, pages * params.pages.page_size);
    }
    prepare_rope(tokens, params.key_width, params.rope_theta, params.rope_scaling);
  }
  if (effective_precision(params) == AttnPrecision::kBf16 && !supports_bf16_precision()) {
    throw std::invalid_argument(
        "attn-precision: bf16 needs AVX-512 BF16 (vdpbf16ps); this decoder runs " +
        std::string(cpu_isa_name(isa_)) + (cpu_has_avx512_bf16() ? "" : " on a CPU without it") +
        "; use f32");
  }
  find_row_runs(params, kPrefillMinRows, row_runs_);
  int64_t row = 0;
  for (const RowRun& run : row_runs_) {
    if (run.first > row) run_decode_kernel(rows_of(params, row, run.first));
    prefill_attention(params, run, pool_, prefill_workspace_, rope_table_.data(),
                      prefill_path(isa_));
    row = run.first + run.count;
  }
  if (row < params.n_seqs || params.n_seqs == 0) {
    run_decode_kernel(row == 0 ? params : rows_of(params, row, params.n_seqs));
  }
}

void FastDecoder::run_decode_kernel(const DecodeParams& params) {
  if (effective_precision(params) == AttnPrecision::kInt8) {
    const bool vnni = (isa_ == CpuIsa::kAvx512 || isa_ == CpuIsa::kAmx) && cpu_has_avx512_vnni();
    vnni ? decode_attention_int8_avx512(params, pool_, workspace_)
         : decode_attention_int8_avx2(params, pool_, workspace_);
    return;
  }
  if (effective_precision(params) == AttnPrecision::kBf16) {
    decode_attention_avx512_bf16(params, pool_, workspace_, rope_table_.data());
    return;
  }
  switch (isa_) {
    case CpuIsa::kAmx:
      decode_attention_amx(params, pool_, workspace_, rope_table_.data());
      return;
    case CpuIsa::kAvx512:
      decode_attention_avx512(params, pool_, workspace_, rope_table_.data());
      return;
    case CpuIsa::kAvx2:
      decode_attention_avx2(params, pool_, workspace_, rope_table_.data());
      return;
    case CpuIsa::kScalar:
      break;
  }
  throw std::logic_error("FastDecoder: no SIMD kernel for " + std::string(cpu_isa_name(isa_)));
}

}  // namespace kvlab
