#include "cli/cache_command.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "report/table.h"
#include "report/units.h"
#include "spec/model_config.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

std::string dtype_storage_text(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return "blocks of 32 int8 + an f16 scale per head row: 34 B a block";
    case DType::kQ4_0:
      return "blocks of 32 4-bit values + an f16 scale per head row: 18 B a block";
    case DType::kFp8:
      return "e4m3 + an f32 scale per head row";
    default:
      return std::to_string(dtype_bytes(dtype)) + " B per scalar";
  }
}

using nlohmann::json;

struct CacheRow {
  ModelConfig config;
  CacheLayout layout;
  int64_t cache_bytes = 0;
  int64_t bytes_per_token = 0;  // all layers
  int64_t attn_params = 0;
  int64_t total_params = 0;
  ModelMacs prefill;
  ModelMacs decode;
};

std::string streams_text(const CacheLayout& layout) {
  if (layout.kernel == DecodeKernel::kRecurrentState) {
    return fmt::format("state {} (f32)", layout.state_scalars);
  }
  if (layout.streams.empty()) return "—";
  std::string out;
  for (const CacheStream& s : layout.streams) {
    if (!out.empty()) out += " + ";
    out += s.n_heads == 1 ? fmt::format("{} {}", s.name(), s.head_width)
                          : fmt::format("{} {}×{}", s.name(), s.n_heads, s.head_width);
    if (layout.stream_dtype(s) != layout.dtype) {
      out += fmt::format(" ({})", dtype_name(layout.stream_dtype(s)));
    }
  }
  if (layout.rope_on_read) out += layout.norm_on_read ? " (norm+rope on read)" : " (rope on read)";
  return out;
}

double saving(int64_t first, int64_t bytes) {
  return 1.0 - static_cast<double>(bytes) / static_cast<double>(first);
}

double share(const ModelMacs& macs) {
  return static_cast<double>(macs.attention.value()) / static_cast<double>(macs.total.value());
}

}  // namespace

std::vector<std::string> cache_default_attns() {
  return {"gqa:8", "q-gqa:8", "gva:8,dr=16", "mla"};
}

CLI::App* add_cache_command(CLI::App& app, CacheOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "cache",
      "KV-cache bytes, parameters and MACs of attention variants for a model shape.\n"
      "With no arguments: llama-3-8b as GQA, Q-GQA, GVA and MLA at 32k (32,768) tokens.");
  add_model_flags(*cmd, o.model);
  cmd->add_option("--attn", o.attn,
                  "Attention spec, repeatable, one per row (default: the model's own). "
                  "Forms: mha, gqa:G, mqa, qk-v, q-kv, qkv1, q-gqa:G, q-mqa, qk-v+[:m=M], "
                  "qkv1+[:m=M], linear, mla[:dc=,dr=,dn=,dv=,dq=], "
                  "gva:G[,dr=16,dn=,init=baseline|scale-matched|variance-fixed,qnorm], "
                  "gta:G[,dr=d_h/2], gla:hc=C[,dc=2·d_h,dr=d_h/2]; "
                  "shared K=V variants take knorm (K = RoPE(RMSNorm(C))) on rope models")
      ->group("Attention");
  cmd->add_option("--context", o.context,
                  "Cached tokens per sequence: an integer, or with k (×1024) / m (×1024²)")
      ->capture_default_str()
      ->group("Cache");
  cmd->add_option("--batch", o.batch, "Sequences")->capture_default_str()->group("Cache");
  cmd->add_option(
         "--dtype", o.dtype,
         "Cache element type: f32 | bf16 | f16 | fp8 | q8_0 | q4_0 (the last three count their "
         "scales: per head row, a 4-byte scale for fp8, an f16 scale per block of 32 for "
         "q8_0/q4_0; rope streams stay bf16 under them)")
      ->capture_default_str()
      ->group("Cache");
  cmd->add_option("--units", o.units, "Human byte units: iec (GiB = 2^30) | si (GB = 10^9)")
      ->capture_default_str()
      ->group("Output");
  cmd->add_option("--format", o.format, "table (Markdown) | json")
      ->capture_default_str()
      ->group("Output");
  cmd->add_flag("--macs", o.macs,
                "Add MACs of a prefill of --context tokens and of one decode step at that "
                "context, with attention's share")
      ->group("Output");
  return cmd;
}

void run_cache(const CacheOptions& o, std::ostream& out) {
  require_output_format(o.format);
  const ByteUnits units = parse_byte_units(o.units);
  const DType dtype = parse_dtype(o.dtype);
  const int64_t context = parse_tokens(o.context, "context");
  if (o.batch <= 0) throw SpecError("batch", "must be > 0, got " + std::to_string(o.batch));
  if (o.macs && context == 0) throw SpecError("context", "--macs needs a context > 0");

  const bool default_comparison = o.model.empty() && o.attn.empty();
  const Preset model = resolve_model(o.model, kCacheDefaultModel);
  std::vector<std::string> attns = o.attn;
  if (attns.empty())
    attns = default_comparison ? cache_default_attns() : std::vector<std::string>{model.attn};

  std::vector<CacheRow> rows;
  for (const std::string& text : attns) {
    CacheRow row;
    try {
      row.config = ModelConfig::make(model.shape, text, dtype);
    } catch (const SpecError& e) {
      // name --attn only when the user gave it; otherwise the spec is the model's own
      throw SpecError(e.field(), o.attn.empty() ? fmt::format("the attention \"{}\" of {}: {}",
                                                              text, model.name, e.what())
                                                : fmt::format("invalid --attn \"{}\" for {}: {}",
                                                              text, model.name, e.what()));
    }
    row.layout = row.config.attn.cache_layout();
    row.cache_bytes = row.config.cache_bytes(context, o.batch).value();
    row.bytes_per_token = row.config.cache_bytes_per_token().value();
    row.attn_params = row.config.attention_param_count().value();
    row.total_params = row.config.param_count().value();
    if (o.macs) {
      row.prefill = row.config.prefill_macs(context);
      row.decode = row.config.decode_macs(context);
    }
    rows.push_back(std::move(row));
  }
  const int64_t first_bytes = rows.front().cache_bytes;
  const ModelShape& s = model.shape;

  if (o.format == "json") {
    json doc;
    doc["model"] = {{"name", model.name},
                    {"description", model.description},
                    {"kind", std::string(model_kind_name(s.kind))},
                    {"layers", s.n_layers},
                    {"d_model", s.d_model},
                    {"heads", s.n_heads},
                    {"head_dim", s.head_dim}};
    doc["context_tokens"] = context;
    doc["batch"] = o.batch;
    doc["dtype"] = std::string(dtype_name(dtype));
    // element dtypes: bytes a scalar; the scaled ones count per row (rows' bytes below)
    doc["dtype_bytes"] = is_element_dtype(dtype) ? json(dtype_bytes(dtype)) : json();
    doc["rows"] = json::array();
    for (const CacheRow& r : rows) {
      json streams = json::array();
      for (const CacheStream& st : r.layout.streams) {
        streams.push_back({{"name", std::string(st.name())},
                           {"heads", st.n_heads},
                           {"head_width", st.head_width},
                           {"dtype", std::string(dtype_name(r.layout.stream_dtype(st)))},
                           {"head_row_bytes", r.layout.head_row_bytes(st)}});
      }
      json row = {{"attn", r.config.attn.to_string()},
                  {"variant", std::string(attn_variant_id(r.config.attn.variant))},
                  {"kernel", std::string(decode_kernel_name(r.layout.kernel))},
                  {"streams", streams},
                  {"state_scalars_per_layer", r.layout.state_scalars},
                  {"cache_scalars_per_token_per_layer", r.layout.scalars_per_token()},
                  {"cache_bytes_per_token", r.bytes_per_token},
                  {"cache_bytes", r.cache_bytes},
                  {"attn_params", r.attn_params},
                  {"total_params", r.total_params}};
      row["saving_vs_first"] = first_bytes > 0 ? json(saving(first_bytes, r.cache_bytes)) : json();
      if (o.macs) {
        row["prefill_macs"] = r.prefill.total.value();
        row["prefill_attn_macs"] = r.prefill.attention.value();
        const bool decodes = r.decode.total.value() > 0;
        row["decode_macs"] = decodes ? json(r.decode.total.value()) : json();
        row["decode_attn_macs"] = decodes ? json(r.decode.attention.value()) : json();
      }
      doc["rows"].push_back(row);
    }
    doc["caveats"] = model.caveat.empty() ? json::array() : json::array({model.caveat});
    out << doc.dump(2) << "\n";
    return;
  }

  const std::string byte_unit = units == ByteUnits::kIec ? "GiB = 2^30 B" : "GB = 10^9 B";
  out << fmt::format("{} — {}: {} layers, D {}, {} heads × {}\n", model.name, model.description,
                     s.n_layers, s.d_model, s.n_heads, s.head_dim);
  out << fmt::format("cache of {} tokens × batch {} in {} ({}); {}\n\n", with_commas(context),
                     o.batch, dtype_name(dtype), dtype_storage_text(dtype), byte_unit);
  std::vector<std::string> headers = {"attn",        "cached per token per layer",
                                      "scalars",     "bytes/token",
                                      "cache bytes", "cache",
                                      "saving",      "attn params",
                                      "total params"};
  if (o.macs) {
    for (const char* h : {"prefill MACs", "attn share", "decode MACs", "attn share"}) {
      headers.push_back(h);
    }
  }
  Table table(headers);
  for (const CacheRow& r : rows) {
    std::vector<std::string> cells = {
        r.config.attn.to_string(),
        streams_text(r.layout),
        std::to_string(r.layout.scalars_per_token()),
        with_commas(r.bytes_per_token),
        with_commas(r.cache_bytes),
        format_bytes(r.cache_bytes, units),
        first_bytes > 0 ? format_percent(saving(first_bytes, r.cache_bytes)) : "—",
        format_si(r.attn_params),
        format_si(r.total_params)};
    if (o.macs) {
      const bool decodes = r.decode.total.value() > 0;
      cells.push_back(format_si(r.prefill.total.value()));
      cells.push_back(format_percent(share(r.prefill)));
      cells.push_back(decodes ? format_si(r.decode.total.value()) : "—");
      cells.push_back(decodes ? format_percent(share(r.decode)) : "—");
    }
    table.add_row(std::move(cells));
  }
  out << table.to_markdown();
  out << "\nsaving: cache bytes relative to the first row. Parameters and MACs are counted from "
         "the spec (k/M/G = 10^3/10^6/10^9).\n";
  if (o.macs) {
    out << "MACs: prefill counts the dense n×n score map and the output head on every token; "
           "decode reads `context` cached tokens, absorbed for gva and mla.\n";
  }
  if (!model.caveat.empty()) out << "note (" << model.name << "): " << model.caveat << "\n";
}

}  // namespace kvlab
