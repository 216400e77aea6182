#include "cli/summary_command.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "nn/transformer.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/model_config.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

struct TreeRow {
  std::string name;
  int64_t params = 0;
  std::string shape;  // of a parameter, or of a leaf module's weight
};

std::string shape_text(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

int64_t count(const torch::nn::Module& m) {
  int64_t total = 0;
  for (const auto& p : m.parameters()) total += p.numel();
  return total;
}

bool is_index(const std::string& name) {
  return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

// Depth-first rows; in a list of blocks (layers, experts) the first block of each size is
// expanded and the others fold into ranges.
void collect(const torch::nn::Module& module, const std::string& name, std::vector<TreeRow>& rows) {
  const auto children = module.named_children();
  const auto own = module.named_parameters(/*recurse=*/false);
  const bool leaf = children.is_empty();
  if (!name.empty()) {
    std::string shape;
    if (leaf && own.contains("weight")) {
      shape = shape_text(own["weight"]) + (own.contains("bias") ? " + bias" : "");
    }
    rows.push_back({name, count(module), shape});
  }
  const std::string prefix = name.empty() ? "" : name + ".";
  if (!leaf) {  // a leaf's weight and bias are summed in its own row
    for (const auto& p : own)
      rows.push_back({prefix + p.key(), p.value().numel(), shape_text(p.value())});
  }
  std::set<int64_t> expanded_sizes;  // in a block list, expand the first block of each size
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string& child = children[i].key();
    const int64_t size = count(*children[i].value());
    if (!is_index(child) || expanded_sizes.insert(size).second) {
      collect(*children[i].value(), prefix + child, rows);
      continue;
    }
    size_t last = i;
    while (last + 1 < children.size() && is_index(children[last + 1].key()) &&
           count(*children[last + 1].value()) == size) {
      ++last;
    }
    const std::string range = last == i ? child : child + "-" + children[last].key();
    rows.push_back({prefix + range + (last == i ? "" : fmt::format(" ({} ×)", last - i + 1)),
                    size * static_cast<int64_t>(last - i + 1), ""});
    i = last;
  }
}

}  // namespace

CLI::App* add_summary_command(CLI::App& app, SummaryOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "summary",
      "Build the model of a shape and attention variant and print its module tree with "
      "parameter counts, next to the count the spec derives (they must agree).");
  add_model_flags(*cmd, o.model);
  cmd->add_option("--attn", o.attn,
                  "Attention spec (default: the model's own); see 'kvlab cache --help'")
      ->group("Attention");
  cmd->add_option("--format", o.format, "table (Markdown) | json")
      ->capture_default_str()
      ->group("Output");
  return cmd;
}

int run_summary(const SummaryOptions& o, std::ostream& out, std::ostream& err) {
  require_output_format(o.format);
  const Preset model = resolve_model(o.model, "llama-3-8b");
  const std::string attn = o.attn.empty() ? model.attn : o.attn;
  ModelConfig config;
  try {
    config = ModelConfig::make(model.shape, attn, DType::kBf16);
  } catch (const SpecError& e) {
    throw SpecError(e.field(),
                    fmt::format("{} \"{}\" for {} ({}): {}",
                                o.attn.empty() ? "the model's own attention" : "invalid --attn",
                                attn, model.name, model_kind_name(model.shape.kind), e.what()));
  }
  // The meta device allocates nothing: a 671B-parameter model is counted in milliseconds.
  const auto meta = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta);
  nn::TransformerModel built(config, meta);
  std::vector<TreeRow> rows;
  collect(*built, "", rows);
  const int64_t params_module = built->parameter_count();
  const int64_t params_spec = config.param_count().value();

  if (o.format == "json") {
    nlohmann::json modules = nlohmann::json::array();
    for (const TreeRow& r : rows) {
      modules.push_back({{"name", r.name}, {"params", r.params}, {"shape", r.shape}});
    }
    out << nlohmann::json{{"model", model.name},
                          {"kind", std::string(model_kind_name(model.shape.kind))},
                          {"attn", config.attn.to_string()},
                          {"params_module", params_module},
                          {"params_spec", params_spec},
                          {"attn_params_spec", config.attention_param_count().value()},
                          {"modules", modules}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format("{} — {} ({}), attention {}\n\n", model.name, model.description,
                       model_kind_name(model.shape.kind), config.attn.to_string());
    Table table({"module", "shape", "params"});
    for (const TreeRow& r : rows) table.add_row({r.name, r.shape, with_commas(r.params)});
    table.add_row({"**total, counted from the module**", "", with_commas(params_module)});
    table.add_row({"**total, derived from the spec**", "", with_commas(params_spec)});
    out << table.to_markdown();
    out << fmt::format("\n{} parameters ({}); attention {} ({} per layer)\n",
                       format_si(params_spec),
                       params_module == params_spec ? "module and spec agree" : "MISMATCH",
                       format_si(config.attention_param_count().value()),
                       with_commas(config.attn.param_count().value()));
  }
  if (params_module != params_spec) {
    err << fmt::format(
        "kvlab summary: internal error: the module has {} parameters but the spec "
        "derives {}\n",
        params_module, params_spec);
    return 1;
  }
  return 0;
}

}  // namespace kvlab
