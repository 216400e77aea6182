#include "kernels/prefill_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/convert.h"
#include "kernels/page_layout.h"
#include "kernels/rope.h"
#include "kernels/thread_pool.h"

namespace kvlab {
namespace {

constexpr int64_t kPrefillStripeTokens = 512;  // tokens read into the matrices at a time
constexpr int64_t kPrefillBlock = 16;          // tokens of one softmax update
constexpr int64_t kPrefillTileRows = 16;       // query rows of one work item
constexpr int64_t kPrefillFillTokens = 64;     // tokens of one reading item

int64_t tokens_of_row(const PageTableView& t, int64_t b) {
  const int64_t pages = t.indptr[b + 1] - t.indptr[b];
  return pages == 0 ? 0 : (pages - 1) * t.page_size + t.last_page_len[b];
}

// Whether row b + 1 continues row b: row b's pages begin its own and it sees no fewer tokens.
bool continues_run(const PageTableView& t, int64_t b) {
  const int32_t first = t.indptr[b], count = t.indptr[b + 1] - first;
  const int32_t next = t.indptr[b + 1], next_count = t.indptr[b + 2] - next;
  if (count > next_count || tokens_of_row(t, b) > tokens_of_row(t, b + 1)) return false;
  return std::equal(t.page_ids + first, t.page_ids + first + count, t.page_ids + next);
}

// Element counts rounded up to 16, so that each array of the workspace starts on a cache line (of
// floats; of bf16 halves, on half of one).
int64_t aligned_floats(int64_t floats) { return (floats + 15) / 16 * 16; }

// `array` grown to hold n elements from its first cache line, and that line.
template <class T>
T* on_cache_line(std::vector<T>& array, int64_t n) {
  constexpr int64_t kPerLine = 64 / sizeof(T);
  if (static_cast<int64_t>(array.size()) < n + kPerLine) {
    array.resize(static_cast<size_t>(n + kPerLine));
  }
  const int64_t misplaced = static_cast<int64_t>(reinterpret_cast<uintptr_t>(array.data()) % 64);
  return array.data() + (64 - misplaced) % 64 / static_cast<int64_t>(sizeof(T));
}

// The run's shape and where its matrices live. Keys are matrices a group (a head where gva dr=0
// rebuilds them per head, key_maps), each serving heads_per_mat heads of every row: its query rows
// are (row r, head) at r · heads_per_mat + the head's place in it, so a row's heads are
// neighbours and later rows come later (their lengths never fall).
struct PrefillRun {
  const DecodeParams* p = nullptr;
  int64_t first = 0, rows = 0;
  int64_t mats = 0, heads_per_mat = 0, q_rows = 0;
  int64_t kw = 0, rw = 0, kd = 0, vw = 0;
  int64_t tokens = 0;                // the last row's
  const int32_t* pages = nullptr;    // the last row's page ids
  const int64_t* lengths = nullptr;  // tokens each row sees
  const float* rope_table = nullptr;
  // workspace
  float* queries = nullptr;  // [mats][q_rows][kd]: q | q_rope
  float* state = nullptr;    // [mats][q_rows][2 + vw]: running max, sum, weighted values
  float* keys_t = nullptr;   // [mats][kPrefillStripeTokens / kPrefillBlock][kd][kPrefillBlock]: a
                             // block's keys by column
  float* values = nullptr;   // [groups][kPrefillStripeTokens][vw]
  float* scratch = nullptr;  // [fill items][kw + vw]
  // the AMX path (tiles): bf16 operands in its orders (PrefillTileArgs), and per reading item
  // whether its values held a NaN or infinity
  bool tiles = false;
  bool direct = false;  // tiles from a bf16 cache's rows as they are (no rotation on read)
  int64_t kd_pad = 0, vw_pad = 0, q_rows_pad = 0;
  uint16_t* q16 = nullptr;       // [mats][q_rows_pad][kd_pad]
  uint16_t* keys16 = nullptr;    // [mats][kPrefillStripeTokens / 16][kd_pad / 2][16][2]
  uint16_t* values16 = nullptr;  // [groups][kPrefillStripeTokens / 32][vw_pad / 16][16][16][2]
  uint8_t* not_finite = nullptr;

  int64_t group_of(int64_t mat) const {
    return p->key_maps != nullptr ? mat / (p->n_heads / p->n_groups) : mat;
  }
  int64_t length(int64_t q_row) const { return lengths[q_row / heads_per_mat]; }
  int64_t fill_items() const { return p->n_groups * (kPrefillStripeTokens / kPrefillFillTokens); }
};

// key [kw] rotated to position j (after RMS-normalising it where the params carry a norm), by the
// rope table's row as the decode kernels rotate on read.
void prefill_norm_and_rotate(const DecodeParams& p, const float* cos_sin, float* key) {
  const int64_t kw = p.key_width;
  if (p.norm_weight != nullptr) {
    float squares = 0;
    for (int64_t i = 0; i < kw; ++i) squares += key[i] * key[i];
    const float inv = 1.0f / std::sqrt(squares / static_cast<float>(kw) + p.norm_eps);
    for (int64_t i = 0; i < kw; ++i) key[i] = key[i] * inv * p.norm_weight[i];
  }
  rotate_by_row(key, kw, cos_sin);
}

// Group g's key row (before any rotation) of the token at `slot`, either key order.
void prefill_key_row(const DecodeParams& p, int64_t slot, int64_t g, float* key) {
  const int64_t page = p.pages.page_size, kw = p.key_width;
  const int64_t key_row = row_bytes(p.dtype, kw);
  if (p.key_order == KeyOrder::kRows) {
    load_rows(p.key_pool + head_row_offset(slot, g, p.n_groups, page, key_row), 1, kw, p.dtype,
              key);
    return;
  }
  const std::byte* block =
      p.key_pool + page_row_offset(slot / page, 0, g, p.n_groups, page, key_row);
  for (int64_t e = 0; e < kw; ++e) {
    uint16_t bits = 0;
    std::memcpy(&bits, block + pair_element_offset(slot % page, e, page), sizeof bits);
    key[e] = bf16_to_f32(bits);
  }
}

// key [kd] into column `column` of a block's keys by column.
void scatter_key_column(const float* key, int64_t kd, float* block, int64_t column) {
  for (int64_t e = 0; e < kd; ++e) block[e * kPrefillBlock + column] = key[e];
}

// Reads tokens [t0, t1) of the stripe starting at s0 for group g: its value rows, and the keys of
// its matrix (or of its heads' matrices, rebuilt from the value rows).
void fill_stripe(const PrefillRun& r, int64_t g, int64_t s0, int64_t t0, int64_t t1,
                 float* scratch) {
  const DecodeParams& p = *r.p;
  const int64_t page = p.pages.page_size, kd = r.kd, kw = r.kw, vw = r.vw;
  const int64_t value_row = row_bytes(p.dtype, vw);
  const DType rope_dtype = rope_pool_dtype(p);
  const int64_t rope_row = row_bytes(rope_dtype, r.rw);
  const int64_t mat_floats = kPrefillStripeTokens * kd;
  const int64_t per_group = p.n_heads / p.n_groups;
  float* key = scratch;  // [kd]
  for (int64_t j = t0; j < t1; ++j) {
    const int64_t slot = r.pages[j / page] * page + j % page;
    const int64_t at = j - s0;
    float* value = r.values + (g * kPrefillStripeTokens + at) * vw;
    load_rows(p.value_pool + head_row_offset(slot, g, p.n_groups, page, value_row), 1, vw, p.dtype,
              value);
    const float* cos_sin = p.rope_on_read ? r.rope_table + j * kw : nullptr;
    if (p.key_maps != nullptr) {
      for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
        const float* m = p.key_maps + h * vw * kw;  // [vw][kw]
        for (int64_t n = 0; n < kw; ++n) key[n] = 0.0f;
        for (int64_t d = 0; d < vw; ++d) {
          for (int64_t n = 0; n < kw; ++n) key[n] += value[d] * m[d * kw + n];
        }
        prefill_norm_and_rotate(p, cos_sin, key);
        scatter_key_column(key, kd,
                           r.keys_t + h * mat_floats + at / kPrefillBlock * kd * kPrefillBlock,
                           at % kPrefillBlock);
      }
      continue;
    }
    prefill_key_row(p, slot, g, key);
    if (p.rope_on_read) prefill_norm_and_rotate(p, cos_sin, key);
    if (r.rw > 0) load_rows(p.rope_pool + slot * rope_row, 1, r.rw, rope_dtype, key + kw);
    scatter_key_column(key, kd, r.keys_t + g * mat_floats + at / kPrefillBlock * kd * kPrefillBlock,
                       at % kPrefillBlock);
  }
}

// The AMX path's bf16 copies of stripe tokens [t0, t1) (from s0) of group g's matrices, read by
// fill_stripe; pad: also zeros from t1 to the end of its 64-token block (prefill_tile_amx's).
// Whether a value was a NaN or infinity.
bool pack_tiles(const PrefillRun& r, int64_t g, int64_t s0, int64_t t0, int64_t t1, bool pad) {
  const int64_t kd = r.kd, kd_pad = r.kd_pad, vw = r.vw, vw_pad = r.vw_pad;
  const int64_t end = pad ? s0 + (t1 - s0 + 63) / 64 * 64 : t1;
  const float* keys_t = r.keys_t + g * kPrefillStripeTokens * kd;
  uint16_t* keys16 = r.keys16 + g * kPrefillStripeTokens * kd_pad;
  const float* values = r.values + g * kPrefillStripeTokens * vw;
  uint16_t* values16 = r.values16 + g * kPrefillStripeTokens * vw_pad;
  bool not_finite = false;
  for (int64_t j = t0; j < end; ++j) {
    const int64_t at = j - s0, column = at % 16;
    const bool real = j < t1;
    const float* key = keys_t + at / 16 * kd * 16;
    uint16_t* key16 = keys16 + at / 16 * kd_pad * 16 + column * 2;
    for (int64_t e = 0; e < kd_pad; ++e) {
      key16[e / 2 * 32 + e % 2] = real && e < kd ? f32_to_bf16(key[e * 16 + column]) : 0;
    }
    const float* value = values + at * vw;
    // [block][chunk][token pair][16][2]
    uint16_t* value16 = values16 + at / 32 * vw_pad * 32 + at % 32 / 2 * 32 + at % 2;
    for (int64_t v = 0; v < vw_pad; ++v) {
      const float x = real && v < vw ? value[v] : 0.0f;
      not_finite = not_finite || !std::isfinite(x);
      value16[v / 16 * 512 + v % 16 * 2] = f32_to_bf16(x);
    }
  }
  return not_finite;
}

// pack_tiles from a bf16 cache's own rows (keys not rotated on read, so no f32 copy is needed):
// the same bf16 operands, the values' bits checked for NaN and infinity.
bool pack_tiles_from_cache(const PrefillRun& r, int64_t g, int64_t s0, int64_t t0, int64_t t1,
                           bool pad) {
  const DecodeParams& p = *r.p;
  const int64_t page = p.pages.page_size, G = p.n_groups;
  const int64_t kw = r.kw, kd_pad = r.kd_pad, vw = r.vw, vw_pad = r.vw_pad;
  const int64_t end = pad ? s0 + (t1 - s0 + 63) / 64 * 64 : t1;  // t0 and end are even
  uint16_t* keys16 = r.keys16 + g * kPrefillStripeTokens * kd_pad;
  uint16_t* values16 = r.values16 + g * kPrefillStripeTokens * vw_pad;
  auto halves = [](const std::byte* at) { return reinterpret_cast<const uint16_t*>(at); };
  uint16_t not_finite = 0;
  const uint16_t* row[2];  // a token pair's value rows (null past t1)
  for (int64_t j = t0; j < end; j += 2) {
    for (int64_t k = 0; k < 2; ++k) {
      const int64_t token = j + k, at = token - s0;
      uint16_t* key16 = keys16 + at / 16 * kd_pad * 16 + at % 16 * 2;  // [pair][16][2]
      row[k] = nullptr;
      if (token >= t1) {
        for (int64_t e = 0; e < kd_pad; ++e) key16[e / 2 * 32 + e % 2] = 0;
        continue;
      }
      const int64_t slot = r.pages[token / page] * page + token % page;
      if (p.key_order == KeyOrder::kRows && kw % 2 == 0) {  // a pair of elements at a time
        const std::byte* key = p.key_pool + head_row_offset(slot, g, G, page, kw * 2);
        uint32_t* key32 = reinterpret_cast<uint32_t*>(key16);  // [pair][16]
        for (int64_t e = 0; e < kw / 2; ++e) {
          uint32_t pair;
          std::memcpy(&pair, key + 4 * e, sizeof pair);
          key32[e * 16] = pair;
        }
      } else if (p.key_order == KeyOrder::kRows) {
        const uint16_t* key = halves(p.key_pool + head_row_offset(slot, g, G, page, kw * 2));
        for (int64_t e = 0; e < kw; ++e) key16[e / 2 * 32 + e % 2] = key[e];
      } else {
        const std::byte* block = p.key_pool + page_row_offset(slot / page, 0, g, G, page, kw * 2);
        for (int64_t e = 0; e < kw; ++e) {
          key16[e / 2 * 32 + e % 2] = *halves(block + pair_element_offset(slot % page, e, page));
        }
      }
      const uint16_t* rope = r.rw > 0 ? halves(p.rope_pool + slot * r.rw * 2) : nullptr;
      for (int64_t e = kw; e < kd_pad; ++e) {
        key16[e / 2 * 32 + e % 2] = e < r.kd ? rope[e - kw] : 0;
      }
      row[k] = halves(p.value_pool + head_row_offset(slot, g, G, page, vw * 2));
    }
    // the pair's values side by side: [chunk][token pair][16 columns][2]
    const int64_t at = j - s0;
    uint16_t* pair16 = values16 + at / 32 * vw_pad * 32 + at % 32 / 2 * 32;
    uint32_t* pair32 = reinterpret_cast<uint32_t*>(pair16);        // [chunk][16 columns], 256 apart
    if (row[0] != nullptr && row[1] != nullptr && vw == vw_pad) {  // whole chunks, no padding
      for (int64_t c = 0; c < vw; c += 16) {
        for (int64_t i = 0; i < 16; ++i) {
          const uint32_t first = row[0][c + i], second = row[1][c + i];
          // a bf16 whose exponent is all ones (NaN or infinity) carries into bit 15
          not_finite |= static_cast<uint16_t>(
              (((first & 0x7F80) + 0x80) | ((second & 0x7F80) + 0x80)) & 0x8000);
          pair32[c * 16 + i] = first | second << 16;
        }
      }
      continue;
    }
    for (int64_t c = 0; c < vw_pad; c += 16) {
      for (int64_t i = 0; i < 16; ++i) {
        const bool in = c + i < vw;
        const uint32_t first = in && row[0] != nullptr ? row[0][c + i] : 0;
        const uint32_t second = in && row[1] != nullptr ? row[1][c + i] : 0;
        not_finite |= static_cast<uint16_t>(
            (((first & 0x7F80) + 0x80) | ((second & 0x7F80) + 0x80)) & 0x8000);
        pair32[c * 16 + i] = first | second << 16;
      }
    }
  }
  return not_finite != 0;
}

// Query rows [i0, i1) of matrix `mat` over the stripe's tokens [s0, s1).
void prefill_tile(const PrefillRun& r, int64_t mat, int64_t i0, int64_t i1, int64_t s0, int64_t s1,
                  PrefillPath path) {
  const int64_t kd = r.kd, vw = r.vw;
  const int64_t end = std::min(s1, r.length(i1 - 1));
  if (path == PrefillPath::kAmx || path == PrefillPath::kAvx512Bf16) {
    PrefillTileArgs a;
    a.q = r.q16 + (mat * r.q_rows_pad + i0) * r.kd_pad;
    a.kd_pad = r.kd_pad;
    a.keys = r.keys16 + mat * kPrefillStripeTokens * r.kd_pad;
    a.values = r.values16 + r.group_of(mat) * kPrefillStripeTokens * r.vw_pad;
    a.vw = vw;
    a.vw_pad = r.vw_pad;
    int64_t lengths[kPrefillTileRows];
    for (int64_t i = i0; i < i1; ++i) lengths[i - i0] = r.length(i);
    a.lengths = lengths;
    a.n_rows = i1 - i0;
    a.s0 = s0;
    a.end = end;
    a.scale = r.p->scale;
    a.state = r.state + (mat * r.q_rows + i0) * (2 + vw);
    path == PrefillPath::kAmx ? prefill_tile_amx(a) : prefill_tile_avx512_bf16(a);
    return;
  }
  int64_t valid[kPrefillTileRows];
  const float* q = r.queries + (mat * r.q_rows + i0) * kd;
  float* state = r.state + (mat * r.q_rows + i0) * (2 + vw);
  const float* keys = r.keys_t + mat * kPrefillStripeTokens * kd;
  const float* values = r.values + r.group_of(mat) * kPrefillStripeTokens * vw;
  for (int64_t t0 = s0; t0 < end; t0 += kPrefillBlock) {
    for (int64_t i = i0; i < i1; ++i)
      valid[i - i0] = std::clamp<int64_t>(r.length(i) - t0, 0, kPrefillBlock);
    (path == PrefillPath::kAvx512 ? prefill_block_avx512 : prefill_block_avx2)(
        q, kd, keys + (t0 - s0) * kd, values + (t0 - s0) * vw, vw, valid, i1 - i0, r.p->scale,
        state);
  }
}

// Every stripe of the run: its rows read (and packed for the tiles), then every tile of query
// rows over it, from fresh states. False where the tiles found a NaN or infinity among the values.
bool run_stripes(const PrefillRun& r, ThreadPool& pool, PrefillPath path,
                 int64_t scratch_per_item) {
  for (int64_t i = 0; i < r.mats * r.q_rows; ++i) {
    float* st = r.state + i * (2 + r.vw);
    st[0] = -INFINITY;
    std::fill_n(st + 1, 1 + r.vw, 0.0f);
  }
  const int64_t groups = r.p->n_groups;
  const int64_t tiles = (r.q_rows + kPrefillTileRows - 1) / kPrefillTileRows;
  for (int64_t s0 = 0; s0 < r.tokens; s0 += kPrefillStripeTokens) {
    const int64_t s1 = std::min(r.tokens, s0 + kPrefillStripeTokens);
    const int64_t fills = (s1 - s0 + kPrefillFillTokens - 1) / kPrefillFillTokens;
    pool.parallel_for(groups * fills, [&](int64_t item) {
      const int64_t g = item / fills, f = item % fills;
      const int64_t t0 = s0 + f * kPrefillFillTokens, t1 = std::min(s1, t0 + kPrefillFillTokens);
      if (r.direct) {
        r.not_finite[item] = pack_tiles_from_cache(r, g, s0, t0, t1, t1 == s1);
        return;
      }
      fill_stripe(r, g, s0, t0, t1, r.scratch + item * scratch_per_item);
      if (r.tiles) r.not_finite[item] = pack_tiles(r, g, s0, t0, t1, t1 == s1);
    });
    for (int64_t item = 0; item < groups * fills && r.tiles; ++item) {
      if (r.not_finite[item]) return false;
    }
    pool.parallel_for(r.mats * tiles, [&](int64_t item) {
      const int64_t mat = item % r.mats, i0 = item / r.mats * kPrefillTileRows;
      const int64_t i1 = std::min(r.q_rows, i0 + kPrefillTileRows);
      if (r.length(i1 - 1) > s0) prefill_tile(r, mat, i0, i1, s0, s1, path);
    });
  }
  return true;
}

}  // namespace

const char* prefill_path_name(PrefillPath path) {
  switch (path) {
    case PrefillPath::kAvx2:
      return "avx2 f32";
    case PrefillPath::kAvx512:
      return "avx512 f32";
    case PrefillPath::kAvx512Bf16:
      return "avx512-bf16 products (bf16 attention, values up to 64 wide; avx512 f32 otherwise)";
    case PrefillPath::kAmx:
      break;
  }
  return "amx bf16 tiles (bf16 attention; avx512 f32 otherwise)";
}

void find_row_runs(const DecodeParams& params, int64_t min_rows, std::vector<RowRun>& runs) {
  runs.clear();
  int64_t start = 0;
  for (int64_t b = 0; b < params.n_seqs; ++b) {
    if (b + 1 < params.n_seqs && continues_run(params.pages, b)) continue;
    if (b + 1 - start >= min_rows) runs.push_back({start, b + 1 - start});
    start = b + 1;
  }
}

void prefill_attention(const DecodeParams& p, const RowRun& run, ThreadPool& pool,
                       PrefillWorkspace& work, const float* rope_table, PrefillPath path) {
  validate_decode_params(p);
  if (run.first < 0 || run.count <= 0 || run.first + run.count > p.n_seqs) {
    throw std::invalid_argument("prefill_attention: run: rows [" + std::to_string(run.first) +
                                ", " + std::to_string(run.first + run.count) +
                                ") are not rows of the call's " + std::to_string(p.n_seqs));
  }
  for (int64_t b = run.first; b + 1 < run.first + run.count; ++b) {
    if (!continues_run(p.pages, b)) {
      throw std::invalid_argument("prefill_attention: run: row " + std::to_string(b + 1) +
                                  " does not continue row " + std::to_string(b) +
                                  "'s pages with as many tokens or more");
    }
  }
  if (p.rope_on_read && rope_table == nullptr) {
    throw std::invalid_argument("prefill_attention: rope_table: RoPE on read needs the table");
  }
  PrefillRun r;
  r.p = &p;
  r.first = run.first;
  r.rows = run.count;
  r.heads_per_mat = p.key_maps != nullptr ? 1 : p.n_heads / p.n_groups;
  r.mats = p.key_maps != nullptr ? p.n_heads : p.n_groups;
  r.q_rows = r.rows * r.heads_per_mat;
  r.kw = p.key_width;
  r.rw = p.rope_width;
  r.kd = r.kw + r.rw;
  r.vw = p.value_width;
  const int64_t last = run.first + run.count - 1;
  r.tokens = tokens_of_row(p.pages, last);
  r.pages = p.pages.page_ids + p.pages.indptr[last];
  r.rope_table = rope_table;
  work.row_tokens.resize(static_cast<size_t>(r.rows));
  for (int64_t i = 0; i < r.rows; ++i)
    work.row_tokens[static_cast<size_t>(i)] = tokens_of_row(p.pages, run.first + i);
  r.lengths = work.row_tokens.data();
  const bool bf16_path = path == PrefillPath::kAmx || path == PrefillPath::kAvx512Bf16;
  r.tiles = bf16_path && effective_precision(p) == AttnPrecision::kBf16 &&
            (path == PrefillPath::kAmx || (r.vw + 15) / 16 <= 4);
  if (bf16_path && !r.tiles) path = PrefillPath::kAvx512;

  const int64_t query_floats = aligned_floats(r.mats * r.q_rows * r.kd);
  const int64_t state_floats = aligned_floats(r.mats * r.q_rows * (2 + r.vw));
  const int64_t key_floats = aligned_floats(r.mats * kPrefillStripeTokens * r.kd);
  const int64_t value_floats = aligned_floats(p.n_groups * kPrefillStripeTokens * r.vw);
  const int64_t scratch_per_item = aligned_floats(r.kw + r.vw + r.rw);
  r.queries = on_cache_line(work.floats, query_floats + state_floats + key_floats + value_floats +
                                             r.fill_items() * scratch_per_item);
  r.state = r.queries + query_floats;
  r.keys_t = r.state + state_floats;
  r.values = r.keys_t + key_floats;
  r.scratch = r.values + value_floats;
  if (r.tiles) {
    r.kd_pad = (r.kd + 31) / 32 * 32;
    r.vw_pad = (r.vw + 15) / 16 * 16;
    r.q_rows_pad = (r.q_rows + 15) / 16 * 16;
    const int64_t q16 = aligned_floats(r.mats * r.q_rows_pad * r.kd_pad);
    const int64_t keys16 = aligned_floats(r.mats * kPrefillStripeTokens * r.kd_pad);
    const int64_t values16 = aligned_floats(p.n_groups * kPrefillStripeTokens * r.vw_pad);
    r.q16 = on_cache_line(work.halves, q16 + keys16 + values16);
    r.keys16 = r.q16 + q16;
    r.values16 = r.keys16 + keys16;
    work.not_finite.resize(static_cast<size_t>(r.fill_items()));
    r.not_finite = work.not_finite.data();
  }

  const int64_t H = p.n_heads;
  for (int64_t mat = 0; mat < r.mats; ++mat) {
    for (int64_t i = 0; i < r.q_rows; ++i) {
      const int64_t row = run.first + i / r.heads_per_mat;
      const int64_t h = mat * r.heads_per_mat + i % r.heads_per_mat;
      float* q = r.queries + (mat * r.q_rows + i) * r.kd;
      std::copy_n(p.q + (row * H + h) * r.kw, r.kw, q);
      if (r.rw > 0) std::copy_n(p.q_rope + (row * H + h) * r.rw, r.rw, q + r.kw);
    }
    for (int64_t i = 0; i < r.q_rows_pad && r.tiles; ++i) {
      uint16_t* q16 = r.q16 + (mat * r.q_rows_pad + i) * r.kd_pad;
      const float* q = r.queries + (mat * r.q_rows + i) * r.kd;
      for (int64_t e = 0; e < r.kd_pad; ++e) {
        q16[e] = i < r.q_rows && e < r.kd ? f32_to_bf16(q[e]) : 0;
      }
    }
  }
  // A run whose values hold a NaN or infinity goes again through the AVX-512 path
  r.direct = r.tiles && p.dtype == DType::kBf16 && !p.rope_on_read;
  if (!run_stripes(r, pool, path, scratch_per_item)) {
    r.tiles = r.direct = false;
    run_stripes(r, pool, PrefillPath::kAvx512, scratch_per_item);
  }

  for (int64_t mat = 0; mat < r.mats; ++mat) {
    for (int64_t i = 0; i < r.q_rows; ++i) {
      const int64_t row = run.first + i / r.heads_per_mat;
      const int64_t h = mat * r.heads_per_mat + i % r.heads_per_mat;
      const float* st = r.state + (mat * r.q_rows + i) * (2 + r.vw);
      float* out = p.out + (row * H + h) * r.vw;
      const bool empty = r.length(i) == 0;  // no tokens: zeros, as the reference writes
      for (int64_t v = 0; v < r.vw; ++v) out[v] = empty ? 0.0f : st[2 + v] / st[1];
    }
  }
}

}  // namespace kvlab
