#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/thread_pool.h"
#include "kernels/weight_allocator.h"
#include "spec/dtype.h"

namespace kvlab {

// The dense layers of a decode step: y_b = W x_b (+ bias) for a small batch of rows x_b, with
// W stored [out][in] row-major (torch's Linear layout). At batch sizes of decode this is a
// matrix-vector product bound by reading W: each weight row is read once for the whole batch.
//
// W's rows are stored in weight_dtype, each row as the cache stores one (spec/dtype.h: f32, bf16
// and f16 elements; ggml's q8_0 and q4_0 blocks of 32, the last one zero-padded); x, bias and y
// are f32. Float weights are widened to f32 and multiplied with x in f32. For q8_0 and q4_0
// weights each row x_b is first rounded to q8_0 blocks (as llama.cpp does), and each block pair
// contributes d_w · d_x · Σ q_w q_x (an exact integer sum).
//
// How a matrix's weights are laid out: kRows, each output row as the cache stores one (above);
// or, for the AVX-512 kernels, kPanels (bf16: pack_bf16_panels; q8_0, q4_0: pack_quant_panels; f32,
// f16: pack_float_panels), the same elements reordered: sixteen output rows side by side, element
// pairs (bf16) or quads (q8_0; q4_0 two quads a byte) interleaved, so one 64-byte
//   load is a vdpbf16ps or vpdpbusd operand for sixteen outputs at once and a row of x enters as
//   one broadcast: the GEMM micro-kernel's form, no sums across lanes; and 32 inputs of a panel are
//   one AMX B tile.
enum class WeightOrder : uint8_t { kRows, kPanels };
constexpr const char* weight_order_name(WeightOrder order) {
  return order == WeightOrder::kPanels ? "panels" : "rows";
}

struct MatVecParams {
  const void* weight = nullptr;  // [out] rows of row_bytes(weight_dtype, in) bytes
  const float* bias = nullptr;   // [out], or nullptr
  const float* x = nullptr;      // [n][x_stride], the first `in` of each row used
  float* y = nullptr;            // [n][y_stride], the first `out` of each row written
  int64_t n = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t x_stride = 0;  // 0: in
  int64_t y_stride = 0;  // 0: out
  DType weight_dtype = DType::kF32;
  WeightOrder weight_order = WeightOrder::kRows;  // kPanels: any dtype but fp8
};

// x's rows rounded to bf16 are padded with zeros to whole chunks of this many elements.
constexpr int64_t kBf16RowChunk = 32;
constexpr int64_t bf16_row_stride(int64_t in) {
  return (in + kBf16RowChunk - 1) / kBf16RowChunk * kBf16RowChunk;
}

// How the AMX kernel lays out x's rounded rows (matvec_bf16_panels too, at this stride): blocks of
// kBf16TileRows rows (the last padded with zero rows), rows bf16_tile_row_stride(in) elements apart
// — an odd number of chunks (64 bytes each), a chunk more than bf16_row_stride where that is even.
// Rows an even number of lines apart share L1 sets: at 2 KiB (1,024 inputs) a tile's 16 rows fell
// in two sets, at a whole number of 4 KiB pages in one, and the two tiles of x a pass reads (32
// rows) missed in them.
constexpr int64_t kBf16TileRows = 16;
constexpr int64_t bf16_tile_row_stride(int64_t in) {
  const int64_t stride = bf16_row_stride(in);
  return stride / kBf16RowChunk % 2 == 0 ? stride + kBf16RowChunk : stride;
}

// bf16 panels (WeightOrder::kPanels): output rows in panels of kPanelRows; panel p holds rows
// 16p..16p+15, and for each pair j of input elements (2j, 2j+1) the sixteen rows' pairs in row
// order, 64 bytes: element (o, i) of the matrix at bf16 index
// (o / 16) · panel_elements + (i / 2) · 32 + (o % 16) · 2 + i % 2. The inputs are padded with
// zeros to whole chunks of kBf16RowChunk (an AMX tile multiply takes 32 inputs of a panel, one
// contiguous KiB), the last panel with zero rows up to 16.
constexpr int64_t kPanelRows = 16;
constexpr int64_t panel_count(int64_t out) { return (out + kPanelRows - 1) / kPanelRows; }
constexpr int64_t bf16_panel_elements(int64_t in) { return bf16_row_stride(in) * kPanelRows; }
constexpr int64_t bf16_panel_bytes(int64_t out, int64_t in) {
  return panel_count(out) * bf16_panel_elements(in) * 2;
}
constexpr int64_t bf16_panel_index(int64_t in, int64_t o, int64_t i) {
  return o / kPanelRows * bf16_panel_elements(in) + i / 2 * 2 * kPanelRows + o % kPanelRows * 2 +
         i % 2;
}
// bf16 rows [out][in] -> bf16_panel_bytes(out, in) bytes of panels (padding zero).
void pack_bf16_panels(const uint16_t* rows, int64_t out, int64_t in, std::byte* panels);

// f32 and f16 panels (WeightOrder::kPanels for those dtypes): output rows in panels of
// kPanelRows; panel p holds rows 16p..16p+15, and for each input i the sixteen rows' elements in
// row order (f32: one 64-byte line an input; f16: half a line): element (o, i) at element index
// (o / 16) · float_panel_elements(dtype, in) + i · 16 + o % 16. The inputs are padded with zeros
// to whole lines (f16: to an even count), the last panel with zero rows up to 16. A load is one
// input of sixteen rows, widened to f32 where f16, against one element of x broadcast.
constexpr bool takes_float_panels(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16;
}
constexpr int64_t float_panel_inputs(DType dtype, int64_t in) {
  return dtype == DType::kF16 ? (in + 1) / 2 * 2 : in;
}
constexpr int64_t float_panel_elements(DType dtype, int64_t in) {
  return float_panel_inputs(dtype, in) * kPanelRows;
}
constexpr int64_t float_panel_bytes(DType dtype, int64_t out, int64_t in) {
  return panel_count(out) * float_panel_elements(dtype, in) * dtype_bytes(dtype);
}
constexpr int64_t float_panel_index(DType dtype, int64_t in, int64_t o, int64_t i) {
  return o / kPanelRows * float_panel_elements(dtype, in) + i * kPanelRows + o % kPanelRows;
}
// f32 or f16 rows [out][in] (row_bytes(dtype, in) bytes each) -> float_panel_bytes(dtype, out,
// in) bytes of panels (padding zero).
void pack_float_panels(DType dtype, const std::byte* rows, int64_t out, int64_t in,
                       std::byte* panels);

// q8_0 and q4_0 panels (WeightOrder::kPanels for block weights): output rows in panels of
// kPanelRows, the last padded with zero rows (quants 0, scale 0), one panel after another,
// QuantPanelLayout::panel_bytes() each (a whole number of 64-byte lines). Within a panel the
// blocks go in pairs: blocks 2g and 2g + 1's quants (quant_panel_block_bytes each), then their
// scales (32 bytes a block: the sixteen rows' f16 scales, in row order); an odd count's last block
// alone, its quants, its scales and 32 zero bytes. So a panel is one stream through memory, its
// scales a line after every 1 KiB (q8_0) or 512 bytes (q4_0) of quants, not a stream of their
// own, which measured slower at one and two rows of x (docs/kernels/dense-decode.md). A block's
// quants, ggml's bytes unchanged:
// - q8_0, 512 bytes: byte 64 · v + 4 · r + e is element 4v + e of row r — the order of an AMX
//   int8 B tile (8 rows of 16 outputs × 4 inputs) and of a vpdpbusd operand for sixteen outputs.
// - q4_0, 256 bytes: byte 64 · v + 4 · r + e (v < 4) is ggml's byte 4v + e of row r's block:
//   element 4v + e in its low nibble, element 16 + 4v + e in its high one; so the low nibbles of
//   a 64-byte load are chunk v of the q8_0 order and the high nibbles chunk v + 4.
// Pure data movement: ggml's blocks read back exactly (quant_panel_block).
constexpr int64_t kQ8PanelBlockBytes = kQuantBlockElements * kPanelRows;  // 512 quants
constexpr int64_t kQ8PanelScaleBytes = 2 * kPanelRows;                    // 16 f16 scales
constexpr int64_t q8_0_blocks(int64_t in) {
  return (in + kQuantBlockElements - 1) / kQuantBlockElements;
}
constexpr bool takes_quant_panels(DType dtype) {
  return dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
}
constexpr int64_t quant_panel_block_bytes(DType dtype) {
  return dtype == DType::kQ4_0 ? kQ8PanelBlockBytes / 2 : kQ8PanelBlockBytes;
}

// Where the blocks of a matrix's q8_0 or q4_0 panels lie: byte offsets from the start of a panel.
struct QuantPanelLayout {
  int64_t block_bytes = 0;  // quant_panel_block_bytes
  int64_t blocks = 0;       // a row's: q8_0_blocks(in)

  constexpr QuantPanelLayout(DType dtype, int64_t in)
      : block_bytes(quant_panel_block_bytes(dtype)), blocks(q8_0_blocks(in)) {}
  // a pair of blocks: their quants, then their scales
  constexpr int64_t pair_bytes() const { return 2 * (block_bytes + kQ8PanelScaleBytes); }
  // block k closes a line-aligned run: the second of a pair, or an odd count's last block (which
  // its scales and 32 zero bytes make a whole line)
  constexpr bool ends_pair(int64_t k) const { return k % 2 == 1 || k + 1 == blocks; }
  constexpr int64_t panel_bytes() const {
    return (blocks + 1) / 2 * pair_bytes() - blocks % 2 * block_bytes;
  }
  // from the start of its pair: the quants of block `second` (0 or 1) of the pair, and its scales
  // (lone: an odd count's last block, the pair's only one)
  constexpr int64_t pair_quants(int64_t second) const { return second * block_bytes; }
  constexpr int64_t pair_scales(int64_t second, bool lone) const {
    return (lone ? 1 : 2) * block_bytes + second * kQ8PanelScaleBytes;
  }
  constexpr int64_t quants(int64_t k) const { return k / 2 * pair_bytes() + pair_quants(k % 2); }
  constexpr int64_t scales(int64_t k) const {
    return k / 2 * pair_bytes() + pair_scales(k % 2, k % 2 == 0 && k + 1 == blocks);
  }
  // bytes from block k's quants to the next block's (past the last block: the next panel's)
  constexpr int64_t span(int64_t k) const {
    return ends_pair(k) ? block_bytes + 2 * kQ8PanelScaleBytes : block_bytes;
  }
};
constexpr int64_t quant_panel_start(DType dtype, int64_t in, int64_t panel) {
  return panel * QuantPanelLayout(dtype, in).panel_bytes();
}
constexpr int64_t quant_panel_bytes(DType dtype, int64_t out, int64_t in) {
  return quant_panel_start(dtype, in, panel_count(out));
}
// ggml's q8_0 or q4_0 rows [out][in] -> quant_panel_bytes(dtype, out, in) bytes of panels
// (padding zero).
void pack_quant_panels(DType dtype, const std::byte* ggml_rows, int64_t out, int64_t in,
                       std::byte* panels);

// Any dtype's panels (not fp8): the bytes of a matrix (bf16_panel_bytes, float_panel_bytes or
// quant_panel_bytes; of a single panel where out is kPanelRows, for bf16, f32 and f16, whose
// panels lie one after another), and rows of row_bytes(dtype, in) bytes packed into them.
constexpr int64_t panel_bytes(DType dtype, int64_t out, int64_t in) {
  return dtype == DType::kBf16       ? bf16_panel_bytes(out, in)
         : takes_float_panels(dtype) ? float_panel_bytes(dtype, out, in)
                                     : quant_panel_bytes(dtype, out, in);
}
void pack_panels(DType dtype, const std::byte* rows, int64_t out, int64_t in, std::byte* panels);
// Block k of row o in ggml's layout (row_bytes(dtype, 32) bytes).
void quant_panel_block(DType dtype, const std::byte* panels, int64_t out, int64_t in, int64_t o,
                       int64_t k, std::byte* block);

// What the kernels keep between calls (the rows of x as q8_0 blocks): it only grows.
struct MatVecScratch {
  WeightVector<int8_t> quants;  // [n][blocks · 32] (q8_0 / q4_0 panels: n rounded up to 16)
  WeightVector<float> scales;   // [n][blocks] (likewise)
  WeightVector<uint16_t> bf16;  // [n][bf16_row_stride(in)]: x rounded to bf16
  // q8_0 / q4_0 panels on AVX-512 VNNI: x's block sums times −128 / −8 (the weights' offset in
  // vpdpbusd's unsigned operand), [n][blocks]
  WeightVector<int32_t> block_bias;
  // matvec_amx_expanded_panels: each task's pair of q8_0 / q4_0 panels expanded to bf16
  WeightVector<uint16_t> expanded;
};

// From this many rows of x, bf16 weights stored as rows on an AMX CPU go through oneDNN's matmul
// (matvec_gemm_bf16): at 16–64 rows it measured 1.8–2.8× the widening AVX-512 kernel's rate, and
// 0.45–0.61× matvec_amx_bf16_panels' over the panels the decoder stores on such CPUs
// (docs/kernels/dense-decode.md).
constexpr int64_t kBf16GemmMinRows = 16;

// y = W x + b for bf16 weights with x rounded to bf16 (nearest even) and f32 sums: oneDNN's
// matmul (vdpbf16ps or AMX tiles) on libtorch's OpenMP threads. The products differ from the
// matrix-vector kernels' (which keep x in f32) by x's rounding.
void matvec_gemm_bf16(const MatVecParams& params, MatVecScratch& scratch);

// From this many rows of x (a prompt's chunk, DecodeModel's kPrefillRows), f32 weight rows go
// through oneDNN's sgemm (matvec_gemm_f32): its OpenMP threads and the decoder's pool share the
// cores, and in the decode step sgemm ran 0.38× the AVX2 kernel's rate at 32 rows and 0.62× at 64,
// while a prompt's 128-row chunks ran 1.22× (docs/kernels/dense-decode.md). (On an AVX-512 CPU f32
// weights are stored in panels, which matvec_float_panels multiplies at every batch.)
constexpr int64_t kF32GemmMinRows = 128;

// y = W x + b for f32 weight rows: oneDNN's sgemm on libtorch's OpenMP threads.
void matvec_gemm_f32(const MatVecParams& params);

// From this many rows of x, bf16 weights on a CPU with AVX-512 BF16 are multiplied in bf16
// products: matvec_bf16_panels over panels (the order such a decoder stores them in; with AMX,
// matvec_amx_bf16_panels), matvec_bf16_products over rows (docs/kernels/dense-decode.md has the
// measurements).
constexpr int64_t kBf16ProductMinRows = 2;

// y = W x + b for bf16 weight rows with x rounded to bf16 (nearest even) and f32 sums, as
// matvec_gemm_bf16, by AVX-512 BF16's vdpbf16ps (matvec_avx512_bf16.cpp) on the pool: four weight
// rows read once for four rows of x, the output rows split over the threads. (Where panels are
// the stored order, matvec_bf16_panels: 1.3–1.8× this rate measured at 16–64 rows.)
void matvec_bf16_products(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// validate_matvec, then std::invalid_argument naming `caller` and the field unless the weights are
// stored in `order` (and are `dtype`, where given): what each kernel checks before it reads them.
void require_weights(const MatVecParams& params, const char* caller, WeightOrder order,
                     std::optional<DType> dtype = std::nullopt);
// require_weights for the kernels over q8_0 and q4_0 panels: panels, of either dtype.
void require_quant_panels(const MatVecParams& params, const char* caller);

// Products that read the same x: x, x_stride, n, in, weight dtype and order alike (y, out, weight
// and bias their own). A kernel that takes them together rounds or quantizes x once for all of
// them and cuts every product's panels into one pool job (a task may run from one product's last
// panels into the next one's first): q, k and v of a layer, or SwiGLU's up and gate.
constexpr int64_t kMaxSharedProducts = 4;
bool shares_x(const MatVecParams& a, const MatVecParams& b);
// std::invalid_argument naming `caller` and the field unless params[0, count) share x and count is
// 1..kMaxSharedProducts.
void require_shared_x(const MatVecParams* params, int64_t count, const char* caller);
// The panel kernels' checks of products taken together: require_shared_x, then each product's
// weights as bf16 panels (require_weights) or as q8_0 / q4_0 panels (require_quant_panels).
void require_shared_bf16_panels(const MatVecParams* params, int64_t count, const char* caller);
void require_shared_float_panels(const MatVecParams* params, int64_t count, const char* caller);
void require_shared_quant_panels(const MatVecParams* params, int64_t count, const char* caller);

// scratch.expanded grown to at least `elements`; its data.
uint16_t* reserve_expanded_panels(MatVecScratch& scratch, int64_t elements);
// Grows the scratch to what `params` needs (outside the ISA builds: no library code is
// instantiated with their flags).
void reserve_matvec_scratch(const MatVecParams& params, MatVecScratch& scratch);

// Whether matrix-vector products take weights of `dtype` (not fp8).
bool matvec_supports(DType dtype);

// The plain reference (dot products accumulated in double; x rounded to q8_0 by store_rows
// for block weights). Throws std::invalid_argument naming the field for inconsistent
// parameters or a weight dtype it does not take.
void matvec_reference(const MatVecParams& params);
void validate_matvec(const MatVecParams& params);
// AVX2 + FMA + F16C (matvec_avx2.cpp): output rows in blocks spread over the pool; each pass
// reads four weight rows once (widened or unpacked in registers) for two rows of x.
void matvec_avx2(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// AVX-512 (matvec_avx512.cpp): sixteen lanes, four weight rows for four rows of x, the tails
// masked (block dtypes two blocks a pass with VNNI's vpdpbusd, so these need AVX-512 VNNI).
void matvec_avx512(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// AVX-512 BF16 over bf16 panels (matvec_avx512_bf16_panels.cpp): at one row of x, each panel
// load widened to f32 (even and odd elements) against x's f32 elements broadcast; from two rows,
// x rounded to bf16 as matvec_bf16_products rounds it, each panel load one vdpbf16ps per row of
// x (up to six rows and four panels a tile; from twelve rows the first twelve, two panels a tile).
void matvec_bf16_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x rounded once.
void matvec_bf16_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                        MatVecScratch& scratch);
// AVX-512 over f32 or f16 panels (matvec_avx512_float_panels.cpp): each load one input of a
// panel's sixteen rows (f16 widened by vcvtph2ps), one FMA per row of x against its element
// broadcast, x in f32: up to six rows of x and four panels a tile; from twelve rows the first
// twelve, two panels a tile (the tiles of matvec_bf16_panels).
void matvec_float_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job.
void matvec_float_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                         MatVecScratch& scratch);
// AVX2 + FMA + F16C over f32, f16 or bf16 panels (matvec_avx2_panels.cpp): the GEMM form on
// vectors of eight, a panel's sixteen rows two of them; x in f32 (bf16 weights widened, their even
// and odd elements against x's two elements of a pair): at one row of x four panels a tile, from
// two rows one panel × up to six rows of x.
void matvec_avx2_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job.
void matvec_avx2_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                        MatVecScratch& scratch);
// AVX-512 VNNI over q8_0 or q4_0 panels (matvec_avx512_quant_panels.cpp): x's rows rounded to
// q8_0; each 64-byte load of a panel one vpdpbusd per row of x against four of x's bytes broadcast
// (q4_0: two, its low and high nibbles), scaled by d_w · d_x once per block; up to six rows of x
// (q4_0: four) and two panels a tile, or two rows and four panels, in walk_rows's runs. The operand
// vpdpbusd takes unsigned is the weights, offset (q8_0: q + 128, one xor a load; q4_0: the nibbles,
// q + 8), and the sums start at −offset · Σ q_x, which takes the offset back out.
void matvec_quant_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x quantized once.
void matvec_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                         MatVecScratch& scratch);
// AVX2 over q8_0 or q4_0 panels (matvec_avx2_quant_panels.cpp), for a CPU without AVX-512 VNNI:
// x's rows rounded to q8_0; each 64-byte load of a panel two vectors of eight rows, each one
// vpmaddubsw per row of x against four of x's bytes broadcast (q4_0: two, its low and high
// nibbles), the unsigned operand the weights' magnitudes with x signed by the weights (q8_0) or
// the nibbles with the sums started at −8 · Σ q_x (q4_0); scaled by d_w · d_x once per block. At
// one row of x four panels a tile, up to four rows two panels, from five rows one panel × up to
// five rows of x.
void matvec_avx2_quant_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x quantized once.
void matvec_avx2_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                              MatVecScratch& scratch);
// AMX int8 over q8_0 or q4_0 panels (matvec_amx_quant_panels.cpp): x's rows rounded to q8_0 as
// above, in blocks of 16 rows (the last padded with zero rows); each tile multiply (tdpbssd) takes
// one block of 32 inputs of a panel (512 int8: q8_0's as stored, q4_0's unpacked 16 blocks at a
// time) against a block of x into 16 × 16 exact integer sums, stored and scaled by d_w · d_x into
// f32 sums in registers.
void matvec_amx_quant_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x quantized once.
void matvec_amx_quant_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                             MatVecScratch& scratch);
// From this many rows of x, q8_0 (q4_0) panels on a CPU with AMX int8 go through
// matvec_amx_quant_panels (below it, matvec_quant_panels): a tile multiply costs the same for 1
// row of x as for 16, and the two kernels measured even at 8 rows on q8_0 weights (VNNI
// 1.1-1.35x ahead at 4, AMX 1.3-1.4x at 16), at 16 on q4_0 (VNNI 1.1-1.8x ahead at 6-14: it reads
// the nibbles as they lie, the tiles unpack them first; docs/kernels/dense-decode.md).
constexpr int64_t kAmxQ8PanelMinRows = 8;
constexpr int64_t kAmxQ4PanelMinRows = 16;

// AMX over q8_0 or q4_0 panels expanded to bf16 (matvec_amx_expanded_panels.cpp): x's rows rounded
// to bf16 as matvec_amx_bf16_panels rounds them; each weight expanded to bf16(q · d_w) (q · d_w is
// exact in f32; rounded to nearest even) in the bf16 panel order, a pair of panels at a time, each
// chunk of 32 inputs just before the first pass's tiles load it; then matvec_amx_bf16_panels' tile
// multiplies over every block of 16 rows of x, f32 sums: the same arithmetic as bf16 weights of
// those values. It differs from the int8 kernels by the rounding of x (to bf16, not q8_0 blocks)
// and of each weight (within 2^-9 of q · d_w relative: under half of q8_0's own step d_w).
void matvec_amx_expanded_panels(const MatVecParams& params, ThreadPool& pool,
                                MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x rounded once.
void matvec_amx_expanded_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                                MatVecScratch& scratch);
// From these many rows of x, q8_0 (q4_0) panels on a CPU with AMX and AVX-512 BF16 go through
// matvec_amx_expanded_panels: the int8 tiles store and scale every block's sums once per block of
// 16 rows of x, the expansion costs once per weight whatever the rows (~34 ns a panel's block of
// 512 weights on one thread of the Emerald Rapids VM), and q4_0's tiles unpack first. The d 1024 ×
// 16 model's dense layers on that VM, against the int8 tiles: q8_0 at 17–48 rows 1.11–1.18× in
// its fast state but 0.79–1.26× in its slow one (mostly below 1), from 64 rows 1.00–1.39× in both
// (1.2–1.5× at 96–128); q4_0 from 17 rows 1.01–1.65× in both (docs/kernels/dense-decode.md).
constexpr int64_t kAmxExpandedQ8MinRows = 49;
constexpr int64_t kAmxExpandedQ4MinRows = 17;

// AMX over bf16 panels (matvec_amx_bf16_panels.cpp): x's rows rounded to bf16 as
// matvec_bf16_products rounds them, in blocks of 16 rows (the last padded with zero rows); each
// tile multiply (tdpbf16ps) takes 32 inputs of one panel — a contiguous KiB — against a block of
// x, two panels × two blocks of x a pass, f32 sums.
void matvec_amx_bf16_panels(const MatVecParams& params, ThreadPool& pool, MatVecScratch& scratch);
// params[0, count), products that share x (require_shared_x), in one job: x rounded once.
void matvec_amx_bf16_panels(const MatVecParams* params, int64_t count, ThreadPool& pool,
                            MatVecScratch& scratch);
// From this many rows of x, bf16 panels on a CPU with AMX go through matvec_amx_bf16_panels
// (below it, matvec_bf16_panels).
constexpr int64_t kAmxPanelMinRows = 2;

}  // namespace kvlab
