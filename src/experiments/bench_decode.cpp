// `kvlab bench decode`: one layer's decode attention at one step, against the read bandwidth
// measured in the same run, and against the same kernel's compute with its rows in L2. Four
// steps: the flags become a plan (specs × contexts), the plan rows and probes, the rows are
// timed in rounds beside the ceilings, and the figures are rendered as a table or JSON.
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

#include "experiments/bench.h"
#include "experiments/decode_bench_row.h"
#include "kernels/attn_precision.h"
#include "kernels/compute_peak.h"
#include "kernels/fast_decoder.h"
#include "kernels/memory_bandwidth.h"
#include "report/statistics.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/attention_family.h"
#include "spec/attention_spec.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

// What the flags ask for, checked: the specs (attn × cache dtype × key order) and the contexts.
struct DecodeBenchPlan {
  std::vector<DType> dtypes;
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> contexts;
};

DecodeBenchPlan plan_decode_bench(const BenchDecodeOptions& o) {
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
  DecodeBenchPlan plan;
  std::vector<DType>& dtypes = plan.dtypes;
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
  std::vector<AttentionSpec>& specs = plan.specs;
  for (const std::string& text : o.attn) {
    for (DType dtype : dtypes) {
      AttentionSpec spec;
      try {
        ModelShape s = shape;
        const std::optional<AttnFamily> family = attn_family_of(text);
        if (family && !spec_family(*family).takes_rope()) s.pos = PosScheme::kNone;
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
  std::vector<int64_t>& contexts = plan.contexts;
  for (const std::string& c : o.context) contexts.push_back(parse_tokens(c, "context"));
  for (int64_t t : contexts) {
    if (t <= 0) throw SpecError("context", "must be > 0");
  }
  return plan;
}

// The precisions asked for, per cache dtype, "auto" resolved for this CPU, in order and
// without repeats: q8_0/q4_0 caches have a SIMD kernel in int8 only, the others in f32 and
// bf16, so each precision makes rows for the caches it has a kernel for.
std::vector<AttnPrecision> precisions_for(const BenchDecodeOptions& o, const FastDecoder& decoder,
                                          DType dtype) {
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
}

// A spec and precision's compute probe and its per-token samples on the bench's threads and on
// one thread.
struct ComputeTiming {
  size_t spec = 0;
  AttnPrecision precision = AttnPrecision::kF32;
  std::unique_ptr<ComputeProbe> probe;
  std::vector<double> all_threads_ns, one_thread_ns;
};

// Every row and compute probe of a plan, built before any is timed.
struct DecodeBenchSetup {
  std::vector<DecodeRow> rows;            // spec × precision × context
  std::vector<size_t> row_spec;           // each row's index into the plan's specs
  std::vector<ComputeTiming> timings;     // one per spec and precision
  std::vector<int> row_timing;            // each row's index into timings; -1: none (linear)
  std::vector<AttnPrecision> precisions;  // every one in use, for the header
};

DecodeBenchSetup build_decode_rows(const DecodeBenchPlan& plan, const BenchDecodeOptions& o,
                                   const FastDecoder& decoder) {
  DecodeBenchSetup setup;
  for (DType dtype : plan.dtypes) {
    for (AttnPrecision precision : precisions_for(o, decoder, dtype)) {
      std::vector<AttnPrecision>& in_use = setup.precisions;
      if (std::find(in_use.begin(), in_use.end(), precision) == in_use.end()) {
        in_use.push_back(precision);
      }
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
  for (const AttentionSpec& spec : plan.specs) {
    for (int64_t context : plan.contexts) {
      round_layer_bytes +=
          static_cast<int64_t>(precisions_for(o, decoder, spec.cache_dtype).size()) *
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
  std::vector<DecodeRow>& rows = setup.rows;
  std::vector<size_t>& row_spec = setup.row_spec;
  std::mt19937 rng(1);
  for (size_t i = 0; i < plan.specs.size(); ++i) {
    for (AttnPrecision precision : precisions_for(o, decoder, plan.specs[i].cache_dtype)) {
      for (int64_t context : plan.contexts) {
        DecodeRow row = make_row(plan.specs[i], precision, context, o.batch, layers, rng, decoder);
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
  // The kernel's compute alone, per spec and precision (its rows share it), on the bench's
  // threads and on one thread, timed in every round beside the rows.
  std::vector<ComputeTiming>& timings = setup.timings;
  std::vector<int>& row_timing = setup.row_timing;
  row_timing.assign(rows.size(), -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    const AttentionSpec& spec = plan.specs[row_spec[k]];
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
  return setup;
}

// The ceilings measured in the same rounds as the rows.
struct DecodeBenchCeilings {
  std::optional<ComputePeak> peak_f32, peak_bf16, peak_int8;  // none: the CPU lacks it
  std::vector<double> bandwidth;                              // GB/s, one a round
};

// Times every row, probe and ceiling in o.repeats interleaved rounds (after 3 warm-up rounds)
// and sets each row's medians and compute figures.
DecodeBenchCeilings measure_decode_rows(DecodeBenchSetup& setup, const BenchDecodeOptions& o,
                                        FastDecoder& decoder) {
  // The compute roof of each precision on the decoder's threads (none where the CPU lacks the
  // instruction), measured once in every round like the bandwidth: on a shared host the cores
  // a VM gets can change between minutes (docs/kernels/decode-attention.md, "The compute column
  // on the bench's threads").
  const bool cap_avx2 = decoder.isa() == CpuIsa::kAvx2;
  DecodeBenchCeilings c;
  c.peak_f32 = measure_compute_peak(MacKind::kF32, decoder.pool(), 0, cap_avx2);
  c.peak_bf16 = measure_compute_peak(MacKind::kBf16, decoder.pool(), 0, cap_avx2);
  c.peak_int8 = measure_compute_peak(MacKind::kInt8, decoder.pool(), 0, cap_avx2);
  BandwidthProbe probe(int64_t{1} << 30);
  FastDecoder one_thread(1, decoder.isa());
  // Every timed step of layer r follows an untimed step of the same row over layer r-1, as a
  // decode reads layer l's cache after layer l-1's: without it a row's step follows the probe
  // or another row, and the first row ran 2–12% slower than identical rows after it (three
  // gqa:8 rows, 16k, 2 threads). Not layer r+1: the layer timed next round then is read twice
  // within one round, and that timed step ran 18–28% faster (3.3 against 4.0–4.6 ms), a condition
  // no decode has; until 2026-11-30 the first row alone got that step, and every "vs first"
  // ratio divided by its flattered time.
  for (int r = 0; r < o.repeats + 3; ++r) {  // 3 warm-up rounds
    const double gb_per_s = probe.read_gb_per_s(decoder.pool());
    if (r >= 3) c.bandwidth.push_back(gb_per_s);
    for (DecodeRow& row : setup.rows) {
      row.step(decoder, r + static_cast<int>(row.layers) - 1);  // untimed
      const auto start = std::chrono::steady_clock::now();
      row.step(decoder, r);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (r >= 3) row.micros.push_back(us);
    }
    if (r < 3) continue;
    for (std::optional<ComputePeak>* peak : {&c.peak_f32, &c.peak_bf16, &c.peak_int8}) {
      if (!peak->has_value()) continue;
      const std::optional<ComputePeak> once =
          measure_compute_peak((*peak)->kind, decoder.pool(), 1, cap_avx2);
      (*peak)->gmacs.push_back(once->gmacs.front());
    }
    for (ComputeTiming& timing : setup.timings) {
      timing.probe->time(decoder, timing.all_threads_ns, o.batch);
      if (decoder.threads() > 1) timing.probe->time(one_thread, timing.one_thread_ns, o.batch);
    }
  }
  for (DecodeRow& row : setup.rows) {
    row.median_us = median_of(row.micros);
    row.min_us = min_of(row.micros);
    row.max_us = max_of(row.micros);
  }
  for (size_t k = 0; k < setup.rows.size(); ++k) {
    if (setup.row_timing[k] < 0) continue;
    const ComputeTiming& timing = setup.timings[static_cast<size_t>(setup.row_timing[k])];
    // a slope can dip below 0 on a noisy machine; the compute is not negative
    const double wall = std::max(0.0, median_of(timing.all_threads_ns));
    setup.rows[k].compute_wall_ns_per_token = wall;
    setup.rows[k].compute_ns_per_token =
        decoder.threads() > 1 ? std::max(0.0, median_of(timing.one_thread_ns)) : wall;
  }
  return c;
}

// The figures of every timed row: its time against the bandwidth and compute ceilings of the
// same rounds, and against the rows it is compared with.
struct DecodeBenchFigures {
  const std::vector<DecodeRow>& rows;
  const DecodeBenchCeilings& c;
  int threads = 1;
  int64_t batch = 1;

  double ceiling() const { return median_of(c.bandwidth); }
  // each row against the first row at the same context, precision and cache dtype (else
  // context and precision, else context)
  const DecodeRow& first_at(const DecodeRow& r) const {
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
  }
  // each row against the same attention's row over a bf16 cache at the same context (its first
  // precision; of the same key order where there is one): what a cache dtype changes
  const DecodeRow* bf16_of(const DecodeRow& r) const {
    const DecodeRow* any_order = nullptr;
    for (const DecodeRow& f : rows) {
      if (f.attn == r.attn && f.context == r.context && f.dtype == DType::kBf16) {
        if (f.key_order == r.key_order) return &f;
        if (any_order == nullptr) any_order = &f;
      }
    }
    return any_order;
  }
  static double gbps(const DecodeRow& r) {
    return static_cast<double>(r.bytes) / (r.median_us * 1e3);
  }
  // the step's reads at the measured bandwidth, and its compute alone on the same threads
  double memory_us(const DecodeRow& r) const {
    return static_cast<double>(r.bytes) / (ceiling() * 1e3);
  }
  double compute_us(const DecodeRow& r) const {
    return *r.compute_wall_ns_per_token * static_cast<double>(r.context * batch) / 1e3;
  }
  // one thread's compute for the same tokens ÷ the threads': what the threads gain (not a
  // figure of its own where the bench runs one thread)
  std::optional<double> threads_speedup(const DecodeRow& r) const {
    if (threads == 1 || *r.compute_wall_ns_per_token <= 0) return std::nullopt;
    return *r.compute_ns_per_token / *r.compute_wall_ns_per_token;
  }
  // The roofline: the bytes at the measured bandwidth, or the multiply-adds at the measured
  // peak of the precision they run in, whichever is longer.
  double peak_gmacs(AttnPrecision precision) const {
    const std::optional<ComputePeak>& peak = precision == AttnPrecision::kBf16   ? c.peak_bf16
                                             : precision == AttnPrecision::kInt8 ? c.peak_int8
                                                                                 : c.peak_f32;
    return peak ? peak->median() : 0.0;
  }
  std::optional<double> roof_compute_us(const DecodeRow& r) const {
    const double peak = peak_gmacs(r.precision);
    if (peak <= 0) return std::nullopt;
    if (r.precision != AttnPrecision::kInt8) return r.macs / (peak * 1e3);
    // int8: the content scores at the int8 peak, the rope slice and the values at f32's
    const double f32 = c.peak_f32 ? c.peak_f32->median() : 0.0;
    if (f32 <= 0) return std::nullopt;
    return r.macs * r.content_score_fraction / (peak * 1e3) +
           r.macs * (1.0 - r.content_score_fraction) / (f32 * 1e3);
  }
  double roofline_us(const DecodeRow& r) const {
    return std::max(memory_us(r), roof_compute_us(r).value_or(0.0));
  }
  std::string bound(const DecodeRow& r) const {
    if (!roof_compute_us(r)) return "-";
    return *roof_compute_us(r) > memory_us(r) ? "compute" : "memory";
  }
};

void render_decode_json(const DecodeBenchFigures& f, CpuIsa isa, std::ostream& out) {
  nlohmann::json doc = {{"bandwidth_gb_per_s", f.ceiling()},
                        {"bandwidth_min_gb_per_s", min_of(f.c.bandwidth)},
                        {"bandwidth_max_gb_per_s", max_of(f.c.bandwidth)},
                        {"threads", f.threads},
                        {"isa", std::string(cpu_isa_name(isa))},
                        {"cpu", cpu_model_name()},
                        {"peak_f32_gmacs", f.c.peak_f32 ? nlohmann::json(f.c.peak_f32->median())
                                                        : nlohmann::json(nullptr)},
                        {"peak_bf16_gmacs", f.c.peak_bf16 ? nlohmann::json(f.c.peak_bf16->median())
                                                          : nlohmann::json(nullptr)},
                        {"peak_int8_gmacs", f.c.peak_int8 ? nlohmann::json(f.c.peak_int8->median())
                                                          : nlohmann::json(nullptr)},
                        {"rows", nlohmann::json::array()}};
  for (const DecodeRow& r : f.rows) {
    nlohmann::json row = {
        {"attn", r.attn},
        {"dtype", std::string(dtype_name(r.dtype))},
        {"key_order", key_order_name(r.key_order)},
        {"precision", attn_precision_name(r.precision)},
        {"context", r.context},
        {"batch", f.batch},
        {"us_per_step", r.median_us},
        {"us_min", r.min_us},
        {"us_max", r.max_us},
        {"cache_bytes_read", r.bytes},
        {"gb_per_s", f.gbps(r)},
        {"bandwidth_fraction", f.gbps(r) / f.ceiling()},
        {"memory_us", f.memory_us(r)},
        {"compute_ns_per_token", nullptr},
        {"compute_us", nullptr},
        {"compute_threads_speedup", nullptr},
        {"macs", r.macs},
        {"roofline_us", f.roofline_us(r)},
        {"roofline_compute_us",
         f.roof_compute_us(r) ? nlohmann::json(*f.roof_compute_us(r)) : nlohmann::json(nullptr)},
        {"roofline_fraction", f.roofline_us(r) / r.median_us},
        {"bound", f.bound(r)},
        {"time_vs_first", r.median_us / f.first_at(r).median_us},
        {"time_vs_bf16_cache", f.bf16_of(r) != nullptr
                                   ? nlohmann::json(r.median_us / f.bf16_of(r)->median_us)
                                   : nlohmann::json(nullptr)},
        {"bytes_vs_first", static_cast<double>(r.bytes) / static_cast<double>(f.first_at(r).bytes)},
        {"layers_rotated", r.layers}};
    if (r.compute_ns_per_token) {
      row["compute_ns_per_token"] = *r.compute_ns_per_token;
      row["compute_us"] = f.compute_us(r);
      if (f.threads_speedup(r)) row["compute_threads_speedup"] = *f.threads_speedup(r);
    }
    doc["rows"].push_back(row);
  }
  out << doc.dump(2) << "\n";
}

void render_decode_table(const DecodeBenchFigures& f, const DecodeBenchPlan& plan,
                         const std::vector<AttnPrecision>& precisions, CpuIsa isa,
                         const BenchDecodeOptions& o, std::ostream& out) {
  const std::vector<DType>& dtypes = plan.dtypes;
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
      cpu_model_name(), cpu_isa_name(isa), f.threads, caches, o.heads, o.head_dim, asked,
      f.ceiling(), min_of(f.c.bandwidth), max_of(f.c.bandwidth), peak_text(f.c.peak_f32),
      peak_text(f.c.peak_bf16), peak_text(f.c.peak_int8), o.repeats);
  Table table({"attn",        "cache",         "keys",           "precision",
               "context",     "us/step",       "min–max us",     "cache bytes read",
               "GB/s",        "of bandwidth",  "macs",           "roofline us",
               "of roofline", "bound",         "memory us",      "kernel compute us",
               "threads ×",   "time vs first", "bytes vs first", "time vs bf16 cache"});
  for (const DecodeRow& r : f.rows) {
    table.add_row(
        {r.attn,
         std::string(dtype_name(r.dtype)),
         key_order_name(r.key_order),
         attn_precision_name(r.precision),
         with_commas(r.context),
         fmt::format("{:.0f}", r.median_us),
         fmt::format("{:.0f}–{:.0f}", r.min_us, r.max_us),
         with_commas(r.bytes),
         fmt::format("{:.2f}", f.gbps(r)),
         format_percent(f.gbps(r) / f.ceiling()),
         fmt::format("{:.3g}", r.macs),
         fmt::format("{:.0f}", f.roofline_us(r)),
         format_percent(f.roofline_us(r) / r.median_us),
         f.bound(r),
         fmt::format("{:.0f}", f.memory_us(r)),
         r.compute_ns_per_token ? fmt::format("{:.0f}", f.compute_us(r)) : "-",
         r.compute_ns_per_token && f.threads_speedup(r)
             ? fmt::format("{:.2f}", *f.threads_speedup(r))
             : "-",
         fmt::format("{:.3f}", r.median_us / f.first_at(r).median_us),
         fmt::format("{:.3f}",
                     static_cast<double>(r.bytes) / static_cast<double>(f.first_at(r).bytes)),
         f.bf16_of(r) != nullptr ? fmt::format("{:.3f}", r.median_us / f.bf16_of(r)->median_us)
                                 : "-"});
  }
  out << table.to_markdown();
}

}  // namespace

int run_bench_decode(const BenchDecodeOptions& o, std::ostream& out) {
  const DecodeBenchPlan plan = plan_decode_bench(o);
  FastDecoder decoder(o.threads);
  DecodeBenchSetup setup = build_decode_rows(plan, o, decoder);
  const DecodeBenchCeilings ceilings = measure_decode_rows(setup, o, decoder);
  const DecodeBenchFigures figures{setup.rows, ceilings, decoder.threads(), o.batch};
  if (o.format == "json") {
    render_decode_json(figures, decoder.isa(), out);
  } else {
    render_decode_table(figures, plan, setup.precisions, decoder.isa(), o, out);
  }
  return 0;
}

}  // namespace kvlab
