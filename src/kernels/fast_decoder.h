#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "kernels/decode_attention.h"
#include "kernels/huge_page_floats.h"
#include "kernels/linear_attention_step.h"
#include "kernels/matvec.h"
#include "kernels/prefill_attention.h"
#include "kernels/thread_pool.h"
#include "spec/cache_layout.h"

namespace kvlab {

enum class CpuIsa { kScalar, kAvx2, kAvx512, kAmx };

// The ISA decode runs on, best first: AMX (tile multiplies for bf16 scores, on top of AVX-512;
// needs the kernel's permission for tile state), AVX-512 (F, BW, VL, DQ), AVX2+FMA+F16C, the
// scalar reference. The environment variable KVLAB_CPU_ISA=scalar|avx2|avx512 caps it (tests
// run every path in one binary). Dense layers have AVX2 and AVX-512 builds, linear attention
// AVX2 only; decode attention AVX2, AVX-512 and AMX builds. Any other value of the
// variable throws std::invalid_argument naming it.
CpuIsa detect_cpu_isa();
// What this CPU can run, ignoring KVLAB_CPU_ISA.
bool cpu_supports(CpuIsa isa);
std::string_view cpu_isa_name(CpuIsa isa);
// AVX-512 BF16 (vdpbf16ps): what AttnPrecision::kBf16 needs on top of AVX-512.
bool cpu_has_avx512_bf16();
// AVX-512 VNNI (vpdpbusd): the AVX-512 build of AttnPrecision::kInt8.
bool cpu_has_avx512_vnni();
// AMX's int8 tile multiplies (tdpbssd): q8_0 weights in panels where the decoder runs AMX (whose
// tile permission cpu_supports(CpuIsa::kAmx) asks for; this does not).
bool cpu_has_amx_int8();
// The fewest rows of x from which the dense layers multiply bf16 weights in bf16 products (x
// rounded to bf16) on `isa`: from kBf16ProductMinRows with AVX-512 BF16 (matvec_bf16_panels, with
// AMX matvec_amx_bf16_panels, or matvec_bf16_products over rows); oneDNN's matmul from
// kBf16GemmMinRows with AMX but no AVX-512 BF16; 0 where they never do (the rows are then widened
// to f32 in registers).
int64_t bf16_product_min_rows(CpuIsa isa = detect_cpu_isa());
// The fewest rows of x from which q8_0 or q4_0 weights (`dtype`) are multiplied by AMX's int8
// tiles on `isa` (matvec_amx_quant_panels: kAmxQ8PanelMinRows or kAmxQ4PanelMinRows where the
// weights are stored in panels), 0 where they never are (or `dtype` is another).
int64_t quant_tile_min_rows(DType dtype, CpuIsa isa = detect_cpu_isa());
// The fewest rows of x from which q8_0 or q4_0 weights (`dtype`) are expanded to bf16 and
// multiplied by AMX's bf16 tiles on `isa` (matvec_amx_expanded_panels, from kAmxExpandedQ8MinRows
// or kAmxExpandedQ4MinRows where the int8 tiles run and the CPU has AVX-512 BF16; the int8 tiles
// then run from quant_tile_min_rows up to it), 0 where they never are.
int64_t quant_expand_min_rows(DType dtype, CpuIsa isa = detect_cpu_isa());
// How prefill_attention computes a prompt chunk's rows for a decoder on `isa` (which must run SIMD
// kernels): AMX tiles where it runs AMX and the CPU has AVX-512 BF16, vdpbf16ps where it runs
// AVX-512 with AVX-512 BF16, AVX-512 f32 elsewhere on AVX-512, else AVX2.
PrefillPath prefill_path(CpuIsa isa = detect_cpu_isa());
// How the decode step stores the dense layers' matrices by default: bf16 where the decoder has
// SIMD kernels (widened to f32 in registers, so no bf16 dot product is needed; half the bytes a
// token reads), f32 on the scalar reference.
DType default_weight_dtype(CpuIsa isa = detect_cpu_isa());

// The order the dense layers' weights of `dtype` are stored in for a decoder on `isa`. q8_0 and
// q4_0 in panels wherever it runs SIMD: matvec_quant_panels where the CPU has AVX-512 VNNI (with
// AMX int8, from quant_tile_min_rows rows, matvec_amx_quant_panels), else
// matvec_avx2_quant_panels. Where it runs AVX-512 or AMX: bf16 in panels where the CPU has AVX-512
// BF16 (matvec_bf16_panels; with AMX from kAmxPanelMinRows rows matvec_amx_bf16_panels); f32 and
// f16 in panels (matvec_float_panels). Where it runs AVX2: f32, f16 and bf16 in panels
// (matvec_avx2_panels). Rows elsewhere.
WeightOrder fastest_weight_order(DType dtype, CpuIsa isa = detect_cpu_isa());

// The key order a cache of `layout` decodes fastest with on `isa`: element pairs where the layout
// takes them (CacheLayout::takes_key_pairs), except with AMX, whose tile path reads key rows
// (pairs measured faster with AVX-512 and AVX2: docs/kernels/decode-attention.md, v14; on an AMX
// host alike within its noise: docs/kernels/dense-decode.md); rows elsewhere.
KeyOrder fastest_key_order(const CacheLayout& layout, CpuIsa isa = detect_cpu_isa());

// What the vector kernels (every ISA, float and int8) keep between calls: it only grows, so
// steady-state decode allocates nothing.
struct DecodeWorkspace {
  std::vector<float> floats;        // partials and per-item scratch
  std::vector<int64_t> tokens;      // per sequence
  std::vector<int64_t> item_start;  // per sequence + 1
  std::vector<int64_t> item_seq;    // per item
};

// The work items of one decode-attention call: each sequence's tokens cut into chunks of
// chunk_tokens (at least one item per sequence), and the workspace sized for fixed_floats
// (starting on a cache line) and floats_per_item for each item, each item's on pages of its own:
// items run side by side on other cores, and a core's prefetchers, running on past the end of
// its item's memory into the next one's, made those lines bounce between the cores
// (docs/kernels/decode-attention.md, v11). Plain code, so the ISA files instantiate no library
// templates.
struct DecodePlan {
  const int64_t* tokens = nullptr;      // [n_seqs]
  const int64_t* item_start = nullptr;  // [n_seqs + 1]
  const int64_t* item_seq = nullptr;    // [n_items]
  int64_t n_items = 0;
  int64_t split_seqs = 0;   // sequences of more than one item
  float* floats = nullptr;  // fixed_floats, 64-byte aligned
  float* items = nullptr;   // item i's floats_per_item at items + i · item_stride (4 KiB aligned)
  int64_t item_stride = 0;
  float* item(int64_t i) const { return items + i * item_stride; }
  int64_t items_of(int64_t seq) const { return item_start[seq + 1] - item_start[seq]; }
};
DecodePlan plan_decode(const DecodeParams& params, DecodeWorkspace& workspace, int64_t chunk_tokens,
                       int64_t fixed_floats, int64_t floats_per_item);

// params.out = each sequence's items' online-softmax partials (each item's: [n_heads][2 + vw]:
// max, sum, accumulator) merged, in parallel over sequences and blocks of heads. Each task reads
// its items in order, a block of heads' partials at a time (contiguous): read head by head
// across items, the partials that other cores had just written arrived one miss at a time.
// A sequence of one item is left out: that item merges itself (merge_lone_item).
void merge_partials(const DecodeParams& params, const DecodePlan& plan, ThreadPool& pool);

// Called by each item once its partial is final: where the item is its sequence's only one, it
// writes that sequence's params.out itself, by the same arithmetic as merge_partials. At short
// contexts every sequence is one item, and the merge pass after them (another pool job reading
// every partial back) took a fifth of the call (batch 64 × 48 tokens, gqa:4, H 16 × 64).
void merge_lone_item(const DecodeParams& params, const DecodePlan& plan, int64_t item);

// Flash-decoding on the CPU: each sequence's tokens are split into chunks spread over a
// persistent thread pool; every chunk keeps an online-softmax partial (max, sum,
// accumulator) for all heads of one group, so each cached row is loaded once per group, not
// once per head; partials are merged at the end. The workspace grows to the largest batch
// seen and is reused: steady-state decode allocates nothing.
class FastDecoder {
 public:
  // Throws std::invalid_argument for a level this machine cannot run (see cpu_supports).
  explicit FastDecoder(int threads, CpuIsa isa = detect_cpu_isa());

  // q8_0 and q4_0 caches have a SIMD kernel for AttnPrecision::kInt8 only; in f32, and fp8
  // caches in every precision, run() computes with the scalar reference (runs_simd says which;
  // benchmarks print it). Where it runs SIMD kernels, runs of kPrefillMinRows or more rows that
  // look at one sequence (a prompt's chunk: find_row_runs) go through prefill_attention, each
  // cached row read once for the run, and the other rows through the decode kernels.
  void run(const DecodeParams& params);
  bool runs_simd(const DecodeParams& params) const;
  // Linear attention's recurrent step (its state instead of a cache).
  void run(const LinearStepParams& params);
  // The dense layers around attention (projections, MLP, LM head): f32 weight rows from
  // kF32GemmMinRows rows of x through oneDNN's sgemm (matvec_gemm_f32), bf16 products where
  // matvec_runs_bf16_products says (AVX-512 BF16's kernel; with AMX, oneDNN's matmul from
  // kBf16GemmMinRows), the AVX-512 kernels where matvec_runs_avx512 says, else AVX2 (the scalar
  // reference on kScalar). q8_0 and q4_0 panels run matvec_quant_panels (matvec_amx_quant_panels
  // from quant_tile_min_rows rows, matvec_amx_expanded_panels from quant_expand_min_rows rows;
  // without matvec_runs_avx512, matvec_avx2_quant_panels),
  // bf16 panels matvec_bf16_panels (with AMX, matvec_amx_bf16_panels from kAmxPanelMinRows rows),
  // where fastest_weight_order(dtype, isa()) says that order, else the scalar reference (weights
  // stored for another decoder's ISA).
  void run(const MatVecParams& params);
  // Products that share x (kernels/matvec.h's require_shared_x; std::invalid_argument otherwise):
  // where the decoder runs the panel kernels (VNNI, AVX-512 BF16, AMX tiles, expanded or not), in
  // one call of the kernel (x prepared once, one pool job), else one after another as
  // run(params[i]).
  void run(const MatVecParams* products, int64_t count);
  bool matvec_runs_bf16_products(const MatVecParams& params) const;
  // Whether run() multiplies f32 weight rows by oneDNN's sgemm (kF32GemmMinRows).
  bool matvec_runs_f32_gemm(const MatVecParams& params) const;
  // Whether run() multiplies q8_0 / q4_0 weights expanded to bf16 (quant_expand_min_rows).
  bool matvec_expands_quant_panels(const MatVecParams& params) const;
  bool matvec_runs_avx512(DType weight_dtype) const;
  // RoPE on read: extends the cos/sin table to `tokens` positions ahead of time, so a decode loop
  // that calls this once with its longest context never grows it between steps.
  void prepare_rope(int64_t tokens, int64_t width, double theta, const RopeScaling& scaling);
  CpuIsa isa() const { return isa_; }
  // Whether run() computes AttnPrecision::kBf16 (AVX-512 BF16, or the scalar reference);
  // elsewhere such a call throws std::invalid_argument.
  bool supports_bf16_precision() const;
  int threads() const { return pool_.size(); }
  // The decoder's threads, for work that should run where the kernels run (bench probes).
  ThreadPool& pool() { return pool_; }

 private:
  // The decode kernel of this ISA and precision over every row of params.
  void run_decode_kernel(const DecodeParams& params);

  CpuIsa isa_;
  ThreadPool pool_;
  DecodeWorkspace workspace_;
  PrefillWorkspace prefill_workspace_;
  std::vector<RowRun> row_runs_;
  MatVecScratch matvec_scratch_;
  // RoPE on read: cos/sin per cached position, extended (doubling) as contexts grow
  HugePageFloats rope_table_;  // read every step for every cached row: on huge pages
  int64_t rope_positions_ = 0;
  int64_t rope_width_ = 0;
  double rope_theta_ = 0;
  RopeScaling rope_scaling_;
};

// The float kernels: one source (decode_attention_simd.inc) built for AVX2+FMA+F16C, for AVX-512
// and for AVX-512 with AMX tiles. rope_table: [positions][key_width] = cos(j·θ_i) for
// i < key_width/2, then sin(j·θ_i).
void decode_attention_avx2(const DecodeParams& params, ThreadPool& pool, DecodeWorkspace& workspace,
                           const float* rope_table);
void decode_attention_avx512(const DecodeParams& params, ThreadPool& pool,
                             DecodeWorkspace& workspace, const float* rope_table);
// bf16 caches' scores by tile multiplies where the shapes allow, the AVX-512 passes otherwise
// (the caller has the kernel's permission to use the tiles).
void decode_attention_amx(const DecodeParams& params, ThreadPool& pool, DecodeWorkspace& workspace,
                          const float* rope_table);
// AttnPrecision::kInt8 over q8_0 / q4_0 caches (decode_attention_int8.inc's driver, the walk shared
// with the float kernels): AVX2 + FMA + F16C (vpmaddubsw), and AVX-512 VNNI (vpdpbusd) where the
// decoder runs AVX-512 and the CPU has it.
void decode_attention_int8_avx2(const DecodeParams& params, ThreadPool& pool,
                                DecodeWorkspace& workspace);
void decode_attention_int8_avx512(const DecodeParams& params, ThreadPool& pool,
                                  DecodeWorkspace& workspace);
// AttnPrecision::kBf16 with vdpbf16ps score and value passes (needs AVX-512 BF16).
void decode_attention_avx512_bf16(const DecodeParams& params, ThreadPool& pool,
                                  DecodeWorkspace& workspace, const float* rope_table);

}  // namespace kvlab
