// `kvlab bench decode`: one layer's decode attention at one step, against the read bandwidth
// measured in the same run, and against the same kernel's compute with its rows in L2.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cache/decode_params.h"
#include "cache/paged_cache.h"
#include "experiments/bench.h"
#include "kernels/attn_precision.h"
#include "kernels/compute_peak.h"
#include "kernels/convert.h"
#include "kernels/decode_attention.h"
#include "kernels/fast_decoder.h"
#include "kernels/huge_page_floats.h"
#include "kernels/memory_bandwidth.h"
#include "report/statistics.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/attention_spec.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

// Tokens per cache page in every row (a whole number of the kernels' blocks).
constexpr int64_t kPageTokens = 16;
static_assert(kPageTokens % kDecodeBlockTokens == 0, "keys in pairs need pages of whole blocks");

// What a row's step reads and writes.
struct RowState {
  std::unique_ptr<PagedKvCache> cache;
  PageTable table;
  std::vector<float> q, qr, result, norm_weight, key_maps, z;
  HugePageFloats states;  // linear attention: on huge pages, like the cache's state slots
};

// One spec at one context over `layers` caches: step(decoder, r) runs the decode of layer
// r % layers.
struct DecodeRow {
  std::string attn;
  DType dtype = DType::kBf16;
  KeyOrder key_order = KeyOrder::kRows;
  AttnPrecision precision = AttnPrecision::kF32;  // what the step computes in
  int64_t context = 0, layers = 0, bytes = 0;     // bytes: one layer's, read by one step
  // multiply-adds of one step (the spec's decode_macs: scores and weighted sums, gva dr=0's
  // rebuilt keys, linear attention's state; element-wise work such as RoPE is not counted)
  double macs = 0;
  // of them, the content scores' share: the part int8 rows do as integer dot products
  double content_score_fraction = 0;
  std::function<void(FastDecoder&, int)> step;
  std::unique_ptr<RowState> state;
  std::vector<double> micros = {};
  double median_us = 0, min_us = 0, max_us = 0;
  // the kernel's compute alone (ComputeProbe), ns per cached token: on one thread, and the
  // step's wall time per token on the bench's threads; none for linear attention
  std::optional<double> compute_ns_per_token, compute_wall_ns_per_token;
};

// Bytes one step reads from one layer: the cache's rows (the spec's bytes per token), or linear
// attention's f32 states, whatever the context.
int64_t step_bytes(const CacheLayout& layout, int64_t context, int64_t batch) {
  if (layout.kernel == DecodeKernel::kRecurrentState) {
    return batch * layout.state_scalars * static_cast<int64_t>(sizeof(float));
  }
  return context * batch * layout.bytes_per_token();
}

// Builds a row whose caches hold small pseudo-random values.
// Throws SpecError when `decoder` would compute it with the scalar reference.
DecodeRow make_row(const AttentionSpec& spec, AttnPrecision precision, int64_t context,
                   int64_t batch, int64_t layers, std::mt19937& rng,
                   const FastDecoder& simd_check) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const CacheLayout layout = spec.cache_layout();
  DecodeRow row;
  row.attn = spec.to_string();
  row.dtype = spec.cache_dtype;
  row.key_order = layout.key_order;
  row.macs =
      static_cast<double>(batch) * static_cast<double>(spec.decode_macs(context).mixing.value());
  row.context = context;
  row.layers = layers;
  row.bytes = step_bytes(layout, context, batch);
  row.state = std::make_unique<RowState>();
  RowState* s = row.state.get();
  if (layout.kernel == DecodeKernel::kRecurrentState) {
    // linear attention: one f32 state per head, read and rewritten each step, the same size
    // at every context (the context column only repeats)
    const int64_t per_layer = batch * layout.state_scalars;
    const int64_t d = spec.head_dim, heads = spec.n_heads;
    s->states = HugePageFloats(layers * per_layer);
    for (int64_t i = 0; i < layers * batch * heads; ++i) {
      float* state = s->states.data() + i * (d * d + d);
      for (int64_t j = 0; j < d * d; ++j) state[j] = 0.01f * uniform(rng);
      for (int64_t j = 0; j < d; ++j) state[d * d + j] = 1.0f;  // positive normalisers
    }
    s->z.resize(static_cast<size_t>(batch * heads * d));
    s->result.resize(s->z.size());
    for (float& x : s->z) x = uniform(rng);
    row.step = [s, layers, per_layer, batch, heads, d](FastDecoder& decoder, int r) {
      decoder.run(LinearStepParams{s->z.data(), s->states.data() + (r % layers) * per_layer,
                                   s->result.data(), batch, heads, d});
    };
    return row;
  }
  const int64_t pages_per_seq = (context + kPageTokens - 1) / kPageTokens;
  s->cache =
      std::make_unique<PagedKvCache>(layout, layers, kPageTokens, pages_per_seq * batch, batch);
  PagedKvCache& cache = *s->cache;
  const bool rebuild = layout.kernel == DecodeKernel::kReconstructKeys;  // gva dr=0
  {  // before the cache is filled: a row the scalar reference would compute is refused
    DecodeParams probe = decode_params_for(spec, cache, 0, PageTable{});
    probe.precision = precision;
    const float marker = 0.0f;  // effective_precision asks only whether keys are rebuilt
    probe.key_maps = rebuild ? &marker : nullptr;
    row.precision = effective_precision(probe);
    if (!simd_check.runs_simd(probe)) {
      throw SpecError("dtype", fmt::format("{} on a {} cache in {} arithmetic runs the scalar "
                                           "reference; bench decode times the SIMD kernels",
                                           row.attn, dtype_name(spec.cache_dtype),
                                           attn_precision_name(row.precision)));
    }
  }
  std::vector<int32_t> seqs;
  for (int64_t b = 0; b < batch; ++b) {
    seqs.push_back(cache.add_sequence());
    cache.append(seqs.back(), context);
  }
  // Fill every pool with small pseudo-random values (an LCG: 1 GiB in well under a second).
  uint32_t lcg = 12345;
  for (int64_t l = 0; l < layers; ++l) {
    for (size_t k = 0; k < layout.streams.size(); ++k) {
      const CacheStream& st = layout.streams[k];
      const int64_t rows = pages_per_seq * batch * kPageTokens * st.n_heads;
      auto* pool = const_cast<std::byte*>(cache.pool(l, static_cast<int64_t>(k)));
      std::vector<float> values(static_cast<size_t>(st.head_width));
      for (int64_t r = 0; r < rows; ++r) {
        for (float& v : values) {
          lcg = lcg * 1664525u + 1013904223u;
          v = static_cast<float>(static_cast<int32_t>(lcg >> 8) % 2001 - 1000) / 1000.0f;
        }
        store_rows(values.data(), 1, st.head_width, layout.stream_dtype(st),
                   pool + r * layout.head_row_bytes(st));
      }
    }
  }
  s->table = cache.page_table(seqs);
  const DecodeParams shape_params = decode_params_for(spec, cache, 0, s->table);
  const int64_t key_width = shape_params.key_width;
  const int64_t rope_width = shape_params.rope_width;
  s->q.resize(static_cast<size_t>(batch * spec.n_heads * key_width));
  s->qr.resize(static_cast<size_t>(batch * spec.n_heads * rope_width));
  s->result.resize(static_cast<size_t>(batch * spec.n_heads * shape_params.value_width));
  for (float& x : s->q) x = uniform(rng);
  for (float& x : s->qr) x = uniform(rng);
  s->norm_weight.assign(static_cast<size_t>(key_width), 1.0f);
  s->key_maps.resize(static_cast<size_t>(rebuild ? spec.n_heads * spec.head_dim * key_width : 0));
  for (float& x : s->key_maps) x = uniform(rng) / std::sqrt(static_cast<float>(spec.head_dim));
  const bool norm_on_read = layout.norm_on_read;
  const double per_token = static_cast<double>(key_width + rope_width + shape_params.value_width);
  row.content_score_fraction = rebuild ? 0.0 : static_cast<double>(key_width) / per_token;
  row.step = [s, spec, layers, rope_width, rebuild, norm_on_read, precision](FastDecoder& decoder,
                                                                             int r) {
    DecodeParams p = decode_params_for(spec, *s->cache, r % layers, s->table);
    p.q = s->q.data();
    p.q_rope = rope_width > 0 ? s->qr.data() : nullptr;
    p.norm_weight = norm_on_read ? s->norm_weight.data() : nullptr;
    p.key_maps = rebuild ? s->key_maps.data() : nullptr;
    p.out = s->result.data();
    p.precision = precision;
    decoder.run(p);
  };
  return row;
}

// Rewrites `table` to cover `tokens` per sequence with page ids that cycle over each sequence's
// own (full) pages: a long context whose rows are a few pages read again and again.
void cycle_pages(PageTable& table, int64_t tokens) {
  const int64_t page = table.page_size, pages = (tokens + page - 1) / page;
  PageTable cycled;
  cycled.page_size = table.page_size;
  cycled.indptr = {0};
  for (int64_t b = 0; b < table.n_seqs(); ++b) {
    const int64_t first = table.indptr[static_cast<size_t>(b)];
    const int64_t own = table.indptr[static_cast<size_t>(b) + 1] - first;
    for (int64_t i = 0; i < pages; ++i) {
      cycled.page_ids.push_back(table.page_ids[static_cast<size_t>(first + i % own)]);
    }
    cycled.indptr.push_back(static_cast<int32_t>(cycled.page_ids.size()));
    cycled.last_page_len.push_back(static_cast<int32_t>(tokens - (pages - 1) * page));
  }
  table = std::move(cycled);
}

// The kernel's compute alone: two rows of one spec whose page tables cycle over a few pages (at
// most kHotBytes of rows a sequence, so they stay in each core's L2), at contexts of one and two
// work items per thread of `threads`; the slope between them is the time per cached token
// without the per-step costs (queries, merge), which long contexts share anyway. Timed on any
// decoder in samples spread over the bench's rounds, so it sees the same minutes as the rows.
class ComputeProbe {
 public:
  ComputeProbe(const AttentionSpec& spec, AttnPrecision precision, int64_t batch, int threads,
               std::mt19937& rng, const FastDecoder& simd_check) {
    constexpr int64_t kHotBytes = 256 << 10;
    const int64_t page_bytes = kPageTokens * spec.cache_layout().bytes_per_token();
    const int64_t short_tokens = kDecodeChunkTokens * threads;
    const int64_t own_pages = std::clamp<int64_t>(kHotBytes / std::max<int64_t>(1, page_bytes), 1,
                                                  short_tokens / kPageTokens);
    for (int k = 0; k < 2; ++k) {
      rows_[k] = make_row(spec, precision, own_pages * kPageTokens, batch, 1, rng, simd_check);
      tokens_[k] = short_tokens * (k + 1);
      cycle_pages(rows_[k].state->table, tokens_[k]);
    }
  }

  // One warm-up step of each row (brings its pages into L2), then `pairs` timed pairs.
  void time(FastDecoder& decoder, std::vector<double>& samples_ns, int64_t batch, int pairs = 3) {
    rows_[0].step(decoder, 0);
    rows_[1].step(decoder, 0);
    for (int i = 0; i < pairs; ++i) {
      double us[2];
      for (int k = 0; k < 2; ++k) {
        const auto start = std::chrono::steady_clock::now();
        rows_[k].step(decoder, 0);
        us[k] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count();
      }
      samples_ns.push_back((us[1] - us[0]) * 1e3 /
                           static_cast<double>((tokens_[1] - tokens_[0]) * batch));
    }
  }

 private:
  DecodeRow rows_[2];
  int64_t tokens_[2] = {};
};

// A spec and precision's compute probe and its per-token samples on the bench's threads and on
// one thread.
struct ComputeTiming {
  size_t spec = 0;
  AttnPrecision precision = AttnPrecision::kF32;
  std::unique_ptr<ComputeProbe> probe;
  std::vector<double> all_threads_ns, one_thread_ns;
};

}  // namespace

int run_bench_decode(const BenchDecodeOptions& o, std::ostream& out) {
  require_output_format(o.format);
  if (o.heads <= 0) throw SpecError("heads", "must be > 0");
  if (o.head_dim <= 0) throw SpecError("head-dim", "must be > 0");
  if (o.batch <= 0) throw SpecError("batch", "must be > 0");
  if (o.repeats <= 0) throw SpecError("repeats", "must be > 0");
  if (o.rotate_mib < 1 || o.rotate_mib > (int64_t{1} << 20)) {
    throw SpecError("rotate-mib", "must be in 1 … 1048576 (MiB)");
  }
  int64_t width = 0;
  if (__builtin_mul_overflow(o.heads, o.head_dim, &width) || width > (int64_t{1} << 24)) {
    throw SpecError("heads",
                    "--heads × --head-dim is above the largest width kvlab accepts "
                    "(16777216)");
  }
  std::vector<DType> dtypes;
  for (const std::string& text : o.dtype) {
    const DType dtype = parse_dtype(text);
    if (dtype == DType::kFp8) {
      throw SpecError("dtype",
                      "fp8 caches decode with the scalar reference only; bench decode "
                      "times the SIMD kernels: use f32, bf16, f16, q8_0 or q4_0");
    }
    if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) dtypes.push_back(dtype);
  }
  if (dtypes.empty()) throw SpecError("dtype", "give at least one cache dtype");
  ModelShape shape = ModelShape::llama_decoder(/*n_layers=*/1, width, o.heads,
                                               /*mlp_width=*/4 * width, /*vocab_size=*/1000,
                                               /*max_context=*/0);
  shape.head_dim = o.head_dim;
  std::vector<std::optional<KeyOrder>> key_orders;  // none: auto (fastest_key_order)
  for (const std::string& text : o.key_order) {
    std::optional<KeyOrder> asked;
    KeyOrder order = KeyOrder::kRows;
    if (text != "auto") {
      if (!parse_key_order(text, order)) {
        throw SpecError("key-order",
                        "\"" + text.substr(0, 40) + "\" is not a key order: auto | rows | pairs");
      }
      asked = order;
    }
    if (std::find(key_orders.begin(), key_orders.end(), asked) == key_orders.end())
      key_orders.push_back(asked);
  }
  if (key_orders.empty()) throw SpecError("key-order", "give at least one key order");
  std::vector<AttentionSpec> specs;  // attn × dtype × key order
  for (const std::string& text : o.attn) {
    for (DType dtype : dtypes) {
      AttentionSpec spec;
      try {
        ModelShape s = shape;
        if (text.rfind("linear", 0) == 0) s.pos = PosScheme::kNone;  // no RoPE inside a state
        spec = AttentionSpec::parse(text, s, dtype);
      } catch (const SpecError& e) {
        throw SpecError(e.field(), "invalid --attn \"" + text + "\": " + e.what());
      }
      const DecodeKernel k = spec.cache_layout().kernel;
      if (k != DecodeKernel::kOneStream && k != DecodeKernel::kTwoStream &&
          k != DecodeKernel::kReconstructKeys && k != DecodeKernel::kRecurrentState) {
        throw SpecError("attn", text + " decodes with the " + std::string(decode_kernel_name(k)) +
                                    " kernel, which bench decode does not cover yet");
      }
      for (const std::optional<KeyOrder>& asked : key_orders) {
        // pairs orders the keys of two-stream bf16 caches; the other rows keep key rows
        const KeyOrder order = asked.value_or(fastest_key_order(spec.cache_layout()));
        if (order == KeyOrder::kTokenPairs && !spec.cache_layout().takes_key_pairs()) continue;
        const bool repeat = std::any_of(specs.begin(), specs.end(), [&](const AttentionSpec& s) {
          return s.to_string() == spec.to_string() && s.cache_dtype == dtype &&
                 s.key_cache_order == order;
        });
        if (repeat) continue;
        specs.push_back(spec);
        specs.back().key_cache_order = order;
        specs.back().validate();
      }
    }
  }
  const bool any_pairs = std::any_of(specs.begin(), specs.end(), [](const AttentionSpec& spec) {
    return spec.key_cache_order == KeyOrder::kTokenPairs;
  });
  if (!any_pairs && std::find(key_orders.begin(), key_orders.end(),
                              std::optional<KeyOrder>(KeyOrder::kTokenPairs)) != key_orders.end()) {
    throw SpecError("key-order",
                    "pairs orders the keys of two-stream variants (mha, gqa, mqa, qk-v, …) over a "
                    "bf16 cache; no --attn × --dtype here is one");
  }
  std::vector<int64_t> contexts;
  for (const std::string& c : o.context) contexts.push_back(parse_tokens(c, "context"));
  for (int64_t t : contexts) {
    if (t <= 0) throw SpecError("context", "must be > 0");
  }
  FastDecoder decoder(o.threads);
  // The precisions asked for, per cache dtype, "auto" resolved for this CPU, in order and
  // without repeats: q8_0/q4_0 caches have a SIMD kernel in int8 only, the others in f32 and
  // bf16, so each precision makes rows for the caches it has a kernel for.
  auto precisions_for = [&](DType dtype) {
    const bool blocks = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
    std::vector<AttnPrecision> found;
    for (const std::string& text : o.precision) {
      // every text is checked, whichever caches it serves
      const AttnPrecision any = resolve_attn_precision(text, decoder.supports_bf16_precision(),
                                                       text == "int8" ? DType::kQ8_0 : dtype);
      if ((any == AttnPrecision::kInt8) != blocks) continue;
      if (std::find(found.begin(), found.end(), any) == found.end()) found.push_back(any);
    }
    if (found.empty()) {
      throw SpecError("attn-precision",
                      std::string("no row for the ") + std::string(dtype_name(dtype)) + " cache: " +
                          (blocks ? "q8_0/q4_0 caches run in int8 (int8 or auto)"
                                  : "f32/bf16/f16 caches run in f32 or bf16 (f32, bf16 or auto)"));
    }
    return found;
  };
  std::vector<AttnPrecision> precisions;  // every one in use, for the header
  for (DType dtype : dtypes) {
    for (AttnPrecision precision : precisions_for(dtype)) {
      if (std::find(precisions.begin(), precisions.end(), precision) == precisions.end())
        precisions.push_back(precision);
    }
  }
  // Every row is set up first, then all are timed in rounds: each round reads the bandwidth
  // probe once and steps every row once, so a machine whose load drifts (shared hosts) shifts
  // every row and the ceiling alike and the ratios between them hold. Every row rotates over
  // the same number of layers, enough that one layer of each row, times that number, reaches
  // --rotate-mib: each layer is read again only after the same rounds for every row (a step's
  // time depends on how long ago its cache was read: 16k-token gqa:8 steps over 8, 32 or 64
  // layers in turn took 3.3, 3.5 and 4.2 ms here). At least 3 layers: the untimed step before
  // layer r's timed one reads layer r-1, which with 2 layers is the layer timed next round.
  constexpr int64_t kMinLayers = 3;
  int64_t round_layer_bytes = 0;  // one layer of every row
  for (const AttentionSpec& spec : specs) {
    for (int64_t context : contexts) {
      round_layer_bytes += static_cast<int64_t>(precisions_for(spec.cache_dtype).size()) *
                           step_bytes(spec.cache_layout(), context, o.batch);
    }
  }
  const int64_t layers = std::max<int64_t>(
      kMinLayers, ((o.rotate_mib << 20) + round_layer_bytes - 1) / round_layer_bytes);
  const double rows_bytes = static_cast<double>(layers) * static_cast<double>(round_layer_bytes);
  const double physical_bytes =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (rows_bytes + static_cast<double>(int64_t{1} << 30) > 0.8 * physical_bytes) {
    throw SpecError("context",
                    fmt::format("the rows' caches ({} layers each) need {:.1f} GiB and the "
                                "bandwidth probe 1 GiB, over 80% of this machine's {:.1f} GiB; "
                                "lower --context, --batch or --rotate-mib",
                                layers, rows_bytes / (1 << 30), physical_bytes / (1 << 30)));
  }
  // rows: spec × precision × context; a spec that computes in f32 whatever is asked (RoPE on
  // read, rebuilt keys, an f32 cache) gets one row per context
  std::vector<DecodeRow> rows;
  std::vector<size_t> row_spec;  // index into specs
  std::mt19937 rng(1);
  for (size_t i = 0; i < specs.size(); ++i) {
    for (AttnPrecision precision : precisions_for(specs[i].cache_dtype)) {
      for (int64_t context : contexts) {
        DecodeRow row = make_row(specs[i], precision, context, o.batch, layers, rng, decoder);
        const bool repeat = std::any_of(rows.begin(), rows.end(), [&](const DecodeRow& r) {
          return r.attn == row.attn && r.dtype == row.dtype && r.key_order == row.key_order &&
                 r.context == context && r.precision == row.precision;
        });
        if (repeat) continue;
        rows.push_back(std::move(row));
        row_spec.push_back(i);
      }
    }
  }
  // The compute roof of each precision on the decoder's threads (none where the CPU lacks the
  // instruction), measured once in every round like the bandwidth: on a shared host the cores
  // a VM gets can change between minutes (docs/kernels/decode-attention.md, "The compute column
  // on the bench's threads").
  const bool cap_avx2 = decoder.isa() == CpuIsa::kAvx2;
  std::optional<ComputePeak> peak_f32 =
      measure_compute_peak(MacKind::kF32, decoder.pool(), 0, cap_avx2);
  std::optional<ComputePeak> peak_bf16 =
      measure_compute_peak(MacKind::kBf16, decoder.pool(), 0, cap_avx2);
  std::optional<ComputePeak> peak_int8 =
      measure_compute_peak(MacKind::kInt8, decoder.pool(), 0, cap_avx2);
  BandwidthProbe probe(int64_t{1} << 30);
  // The kernel's compute alone, per spec and precision (its rows share it), on the bench's
  // threads and on one thread, timed in every round beside the rows.
  FastDecoder one_thread(1, decoder.isa());
  std::vector<ComputeTiming> timings;
  std::vector<int> row_timing(rows.size(), -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    const AttentionSpec& spec = specs[row_spec[k]];
    if (spec.cache_layout().kernel == DecodeKernel::kRecurrentState) continue;
    for (size_t t = 0; t < timings.size() && row_timing[k] < 0; ++t) {
      if (timings[t].spec == row_spec[k] && timings[t].precision == rows[k].precision)
        row_timing[k] = static_cast<int>(t);
    }
    if (row_timing[k] >= 0) continue;
    ComputeTiming timing;
    timing.spec = row_spec[k];
    timing.precision = rows[k].precision;
    timing.probe = std::make_unique<ComputeProbe>(spec, rows[k].precision, o.batch,
                                                  decoder.threads(), rng, decoder);
    timings.push_back(std::move(timing));
    row_timing[k] = static_cast<int>(timings.size() - 1);
  }
  // Every timed step of layer r follows an untimed step of the same row over layer r-1, as a
  // decode reads layer l's cache after layer l-1's: without it a row's step follows the probe
  // or another row, and the first row ran 2–12% slower than identical rows after it (three
  // gqa:8 rows, 16k, 2 threads). Not layer r+1: the layer timed next round then is read twice
  // within one round, and that timed step ran 18–28% faster (3.3 against 4.0–4.6 ms), a condition
  // no decode has; until 2026-11-30 the first row alone got that step, and every "vs first"
  // ratio divided by its flattered time.
  std::vector<double> bandwidth;
  for (int r = 0; r < o.repeats + 3; ++r) {  // 3 warm-up rounds
    const double gb_per_s = probe.read_gb_per_s(decoder.pool());
    if (r >= 3) bandwidth.push_back(gb_per_s);
    for (DecodeRow& row : rows) {
      row.step(decoder, r + static_cast<int>(row.layers) - 1);  // untimed
      const auto start = std::chrono::steady_clock::now();
      row.step(decoder, r);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (r >= 3) row.micros.push_back(us);
    }
    if (r < 3) continue;
    for (std::optional<ComputePeak>* peak : {&peak_f32, &peak_bf16, &peak_int8}) {
      if (!peak->has_value()) continue;
      const std::optional<ComputePeak> once =
          measure_compute_peak((*peak)->kind, decoder.pool(), 1, cap_avx2);
      (*peak)->gmacs.push_back(once->gmacs.front());
    }
    for (ComputeTiming& timing : timings) {
      timing.probe->time(decoder, timing.all_threads_ns, o.batch);
      if (decoder.threads() > 1) timing.probe->time(one_thread, timing.one_thread_ns, o.batch);
    }
  }
  for (DecodeRow& row : rows) {
    row.median_us = median_of(row.micros);
    row.min_us = min_of(row.micros);
    row.max_us = max_of(row.micros);
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    if (row_timing[k] < 0) continue;
    const ComputeTiming& timing = timings[static_cast<size_t>(row_timing[k])];
    // a slope can dip below 0 on a noisy machine; the compute is not negative
    const double wall = std::max(0.0, median_of(timing.all_threads_ns));
    rows[k].compute_wall_ns_per_token = wall;
    rows[k].compute_ns_per_token =
        decoder.threads() > 1 ? std::max(0.0, median_of(timing.one_thread_ns)) : wall;
  }
  const double ceiling = median_of(bandwidth);
  const double bandwidth_min = min_of(bandwidth), bandwidth_max = max_of(bandwidth);
  // each row against the first row at the same context, precision and cache dtype (else
  // context and precision, else context)
  auto first_at = [&](const DecodeRow& r) -> const DecodeRow& {
    for (const DecodeRow& f : rows) {
      if (f.context == r.context && f.precision == r.precision && f.dtype == r.dtype) return f;
    }
    for (const DecodeRow& f : rows) {
      if (f.context == r.context && f.precision == r.precision) return f;
    }
    for (const DecodeRow& f : rows) {
      if (f.context == r.context) return f;
    }
    return r;
  };
  // each row against the same attention's row over a bf16 cache at the same context (its first
  // precision; of the same key order where there is one): what a cache dtype changes
  auto bf16_of = [&](const DecodeRow& r) -> const DecodeRow* {
    const DecodeRow* any_order = nullptr;
    for (const DecodeRow& f : rows) {
      if (f.attn == r.attn && f.context == r.context && f.dtype == DType::kBf16) {
        if (f.key_order == r.key_order) return &f;
        if (any_order == nullptr) any_order = &f;
      }
    }
    return any_order;
  };
  auto gbps = [](const DecodeRow& r) { return static_cast<double>(r.bytes) / (r.median_us * 1e3); };
  // the step's reads at the measured bandwidth, and its compute alone on the same threads
  auto memory_us = [&](const DecodeRow& r) {
    return static_cast<double>(r.bytes) / (ceiling * 1e3);
  };
  auto compute_us = [&](const DecodeRow& r) {
    return *r.compute_wall_ns_per_token * static_cast<double>(r.context * o.batch) / 1e3;
  };
  // one thread's compute for the same tokens ÷ the threads': what the threads gain (not a
  // figure of its own where the bench runs one thread)
  auto threads_speedup = [&](const DecodeRow& r) -> std::optional<double> {
    if (decoder.threads() == 1 || *r.compute_wall_ns_per_token <= 0) return std::nullopt;
    return *r.compute_ns_per_token / *r.compute_wall_ns_per_token;
  };
  // The roofline: the bytes at the measured bandwidth, or the multiply-adds at the measured
  // peak of the precision they run in, whichever is longer.
  auto peak_gmacs = [&](AttnPrecision precision) {
    const std::optional<ComputePeak>& peak = precision == AttnPrecision::kBf16   ? peak_bf16
                                             : precision == AttnPrecision::kInt8 ? peak_int8
                                                                                 : peak_f32;
    return peak ? peak->median() : 0.0;
  };
  auto roof_compute_us = [&](const DecodeRow& r) -> std::optional<double> {
    const double peak = peak_gmacs(r.precision);
    if (peak <= 0) return std::nullopt;
    if (r.precision != AttnPrecision::kInt8) return r.macs / (peak * 1e3);
    // int8: the content scores at the int8 peak, the rope slice and the values at f32's
    const double f32 = peak_f32 ? peak_f32->median() : 0.0;
    if (f32 <= 0) return std::nullopt;
    return r.macs * r.content_score_fraction / (peak * 1e3) +
           r.macs * (1.0 - r.content_score_fraction) / (f32 * 1e3);
  };
  auto roofline_us = [&](const DecodeRow& r) {
    return std::max(memory_us(r), roof_compute_us(r).value_or(0.0));
  };
  auto bound = [&](const DecodeRow& r) -> std::string {
    if (!roof_compute_us(r)) return "-";
    return *roof_compute_us(r) > memory_us(r) ? "compute" : "memory";
  };
  if (o.format == "json") {
    nlohmann::json doc = {
        {"bandwidth_gb_per_s", ceiling},
        {"bandwidth_min_gb_per_s", bandwidth_min},
        {"bandwidth_max_gb_per_s", bandwidth_max},
        {"threads", decoder.threads()},
        {"isa", std::string(cpu_isa_name(decoder.isa()))},
        {"cpu", cpu_model_name()},
        {"peak_f32_gmacs", peak_f32 ? nlohmann::json(peak_f32->median()) : nlohmann::json(nullptr)},
        {"peak_bf16_gmacs",
         peak_bf16 ? nlohmann::json(peak_bf16->median()) : nlohmann::json(nullptr)},
        {"peak_int8_gmacs",
         peak_int8 ? nlohmann::json(peak_int8->median()) : nlohmann::json(nullptr)},
        {"rows", nlohmann::json::array()}};
    for (const DecodeRow& r : rows) {
      nlohmann::json row = {
          {"attn", r.attn},
          {"dtype", std::string(dtype_name(r.dtype))},
          {"key_order", key_order_name(r.key_order)},
          {"precision", attn_precision_name(r.precision)},
          {"context", r.context},
          {"batch", o.batch},
          {"us_per_step", r.median_us},
          {"us_min", r.min_us},
          {"us_max", r.max_us},
          {"cache_bytes_read", r.bytes},
          {"gb_per_s", gbps(r)},
          {"bandwidth_fraction", gbps(r) / ceiling},
          {"memory_us", memory_us(r)},
          {"compute_ns_per_token", nullptr},
          {"compute_us", nullptr},
          {"compute_threads_speedup", nullptr},
          {"macs", r.macs},
          {"roofline_us", roofline_us(r)},
          {"roofline_compute_us",
           roof_compute_us(r) ? nlohmann::json(*roof_compute_us(r)) : nlohmann::json(nullptr)},
          {"roofline_fraction", roofline_us(r) / r.median_us},
          {"bound", bound(r)},
          {"time_vs_first", r.median_us / first_at(r).median_us},
          {"time_vs_bf16_cache", bf16_of(r) != nullptr
                                     ? nlohmann::json(r.median_us / bf16_of(r)->median_us)
                                     : nlohmann::json(nullptr)},
          {"bytes_vs_first", static_cast<double>(r.bytes) / static_cast<double>(first_at(r).bytes)},
          {"layers_rotated", r.layers}};
      if (r.compute_ns_per_token) {
        row["compute_ns_per_token"] = *r.compute_ns_per_token;
        row["compute_us"] = compute_us(r);
        if (threads_speedup(r)) row["compute_threads_speedup"] = *threads_speedup(r);
      }
      doc["rows"].push_back(row);
    }
    out << doc.dump(2) << "\n";
    return 0;
  }
  std::string asked;
  for (AttnPrecision precision : precisions) {
    asked += (asked.empty() ? "" : ", ") + std::string(attn_precision_name(precision));
  }
  auto peak_text = [](const std::optional<ComputePeak>& peak) {
    return peak ? fmt::format("{:.1f}", peak->median()) : std::string("none");
  };
  std::string caches;
  for (DType dtype : dtypes) {
    caches += (caches.empty() ? "" : ", ") + std::string(dtype_name(dtype));
  }
  out << fmt::format(
      "bench decode: {}; {} kernel, {} threads, {} cache, H {} × d_h {}, attn precision {}; "
      "read bandwidth {:.2f} GB/s (median of the rounds, {:.2f}–{:.2f}; GB = 10^9 B); peak "
      "G multiply-adds/s f32 {}, bf16 {}, int8 {} (bench compute's loops on these threads, "
      "medians of one run a round); "
      "rows and bandwidth timed in {} interleaved rounds, each timed step right after an untimed "
      "one over the row's previous layer (as in a decode); \"vs first\": the first row at the "
      "same context, precision and cache; \"vs bf16 cache\": the same attention's bf16-cache row; "
      "memory us: the bytes at that bandwidth; roofline us: "
      "the larger of memory us and the step's multiply-adds at the peak of their precision "
      "(int8: the content scores at the int8 peak, the rest at f32's; bound: which); kernel "
      "compute us: the kernel's time for the row's tokens on these threads with its rows in L2 "
      "(a long context over a few pages, read again and again; timed in the same rounds); "
      "threads ×: one thread's compute for the same tokens ÷ that; keys: the key stream's order "
      "in the pages (rows, or pairs: element pairs of 16 tokens in one vector)\n\n",
      cpu_model_name(), cpu_isa_name(decoder.isa()), decoder.threads(), caches, o.heads, o.head_dim,
      asked, ceiling, bandwidth_min, bandwidth_max, peak_text(peak_f32), peak_text(peak_bf16),
      peak_text(peak_int8), o.repeats);
  Table table({"attn",        "cache",         "keys",           "precision",
               "context",     "us/step",       "min–max us",     "cache bytes read",
               "GB/s",        "of bandwidth",  "macs",           "roofline us",
               "of roofline", "bound",         "memory us",      "kernel compute us",
               "threads ×",   "time vs first", "bytes vs first", "time vs bf16 cache"});
  for (const DecodeRow& r : rows) {
    table.add_row(
        {r.attn,
         std::string(dtype_name(r.dtype)),
         key_order_name(r.key_order),
         attn_precision_name(r.precision),
         with_commas(r.context),
         fmt::format("{:.0f}", r.median_us),
         fmt::format("{:.0f}–{:.0f}", r.min_us, r.max_us),
         with_commas(r.bytes),
         fmt::format("{:.2f}", gbps(r)),
         format_percent(gbps(r) / ceiling),
         fmt::format("{:.3g}", r.macs),
         fmt::format("{:.0f}", roofline_us(r)),
         format_percent(roofline_us(r) / r.median_us),
         bound(r),
         fmt::format("{:.0f}", memory_us(r)),
         r.compute_ns_per_token ? fmt::format("{:.0f}", compute_us(r)) : "-",
         r.compute_ns_per_token && threads_speedup(r) ? fmt::format("{:.2f}", *threads_speedup(r))
                                                      : "-",
         fmt::format("{:.3f}", r.median_us / first_at(r).median_us),
         fmt::format("{:.3f}",
                     static_cast<double>(r.bytes) / static_cast<double>(first_at(r).bytes)),
         bf16_of(r) != nullptr ? fmt::format("{:.3f}", r.median_us / bf16_of(r)->median_us) : "-"});
  }
  out << table.to_markdown();
  return 0;
}

}  // namespace kvlab
