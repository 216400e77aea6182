#include "cli/convert_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "cli/text_tokens.h"
#include "convert/convert_model.h"
#include "convert/task_calibration.h"
#include "data/task.h"
#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "nn/checkpoint.h"
#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

// Windows of a text file: the last quarter (at most --held-out-windows) held out.
convert::Calibration file_calibration(const std::string& dir, const ModelShape& shape,
                                      const ConvertOptions& o) {
  std::string text;
  try {
    text = read_file(o.calibration, data::kMaxTextBytes);
  } catch (const std::runtime_error& e) {
    throw SpecError("calibration", e.what());
  }
  const TextTokens tokens = tokens_of_text(dir, shape, text);
  const int64_t t = o.context > 0
                        ? o.context
                        : std::min<int64_t>(shape.max_context > 0 ? shape.max_context : 512, 512);
  const int64_t windows = static_cast<int64_t>(tokens.ids.size()) / t;
  if (windows < 2) {
    throw SpecError("calibration",
                    fmt::format("{} is {} tokens ({}): at least 2 windows of {} tokens are needed "
                                "(one to fit, one held out)",
                                o.calibration, tokens.ids.size(), tokens.tokenizer, t));
  }
  const int64_t held = std::min(o.held_out_windows, std::max<int64_t>(1, windows / 4));
  const int64_t fit = std::min(windows - held, (o.calibration_tokens + t - 1) / t);
  const torch::Tensor all =
      torch::tensor(tokens.ids, torch::kLong).narrow(0, 0, windows * t).view({windows, t});
  return {all.narrow(0, 0, fit), all.narrow(0, windows - held, held)};
}

void print_report(const convert::ConversionReport& r, const ModelConfig& source,
                  const ModelConfig& target, const std::string& out_dir, std::ostream& out) {
  out << fmt::format("converted {} -> {} ({} tokens fitted, {} held out)\n", r.source_attn,
                     r.target_attn, r.fit_tokens, r.held_out_tokens);
  if (r.rotary) {
    std::string pairs;
    for (const int64_t p : r.rotary->pairs())
      pairs += (pairs.empty() ? "" : ",") + std::to_string(p);
    out << fmt::format(
        "RoPE kept on pairs {} of {} ({:.1f}% of the q·k contribution); rope_theta {:.6g}, "
        "scaling {} {:.6g}\n",
        pairs, source.shape.head_dim / 2,
        100.0 * r.rotary->contribution / std::max(r.rotary->total_contribution, 1e-300),
        r.rope_theta, rope_scaling_kind_name(r.rope_scaling.kind), r.rope_scaling.factor);
  }
  const int64_t source_bytes = source.cache_bytes_per_token().value();
  const int64_t target_bytes = target.cache_bytes_per_token().value();
  out << fmt::format("cache per token: {} -> {} B ({:.3f}×); parameters {} -> {}\n\n",
                     with_commas(source_bytes), with_commas(target_bytes),
                     static_cast<double>(target_bytes) / static_cast<double>(source_bytes),
                     with_commas(source.param_count().value()),
                     with_commas(target.param_count().value()));
  Table table({"layer", "method", "map error", "output error", "other candidates (output error)"});
  for (const convert::LayerReport& l : r.layers) {
    std::string others;
    for (const convert::CandidateError& c : l.candidates) {
      if (c.method == l.method) continue;
      others += fmt::format("{}{} {:.3g}", others.empty() ? "" : ", ", c.method, c.output_error);
    }
    const std::optional<double>& explained = l.kept().explained_variance;
    const std::string method =
        explained ? fmt::format("{} ({:.1f}% of the energy)", l.method, 100 * *explained)
                  : l.method;
    table.add_row({std::to_string(l.layer), method, fmt::format("{:.3g}", l.kept().map_error),
                   fmt::format("{:.3g}", l.kept().output_error), others});
  }
  out << table.to_markdown() << "\nerrors: ‖converted − source‖ / ‖source‖ on the held-out "
      << "tokens, per layer given the source's input\nwrote " << out_dir << "\n";
}

}  // namespace

CLI::App* add_convert_command(CLI::App& app, ConvertOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert a trained model's attention to another variant without training it again: every "
      "attention layer is refitted from its real inputs on calibration text, everything else is "
      "copied. The source: a kvlab run or a Hugging Face folder with mha, gqa or mqa attention. "
      "Targets: gqa:G / mqa / mha (key and value heads mean-pooled), q-kv / q-gqa:G / q-mqa (K=V: "
      "the best per layer of averaged, kept-K, kept-V and least-squares projections), gva:G,dr=R "
      "and gta:G,dr=R (RoPE kept on the R channels that carry most of q·k, merged into one "
      "shared key; each head's key rebuilt from the values by least squares), mla:dc=C,dr=R "
      "(the same RoPE selection, then one latent of C from a PCA of every head's keys and values; "
      "its cached latent has no norm: plainlatent, added for you). G must divide the source's "
      "groups. Prints, per layer, the relative error of the attention maps and of the "
      "layer's output on held-out tokens, and writes a kvlab checkpoint folder (with the "
      "report in config.json) that eval, generate and train --init-from read.\n"
      "  kvlab convert --checkpoint runs/text/gqa --attn gva:2,dr=16 --out runs/text/gva-conv\n"
      "  kvlab convert --checkpoint path/to/hf-model --attn q-gqa:4 --calibration book.txt "
      "--out conv");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "Source: a run or checkpoint folder, or a "
                  "Hugging Face model folder")
      ->required();
  cmd->add_option("--attn", o.attn, "Target attention spec (e.g. gva:2,dr=16)")->required();
  cmd->add_option("--out", o.out, "Folder to write (must not exist, or be empty)")->required();
  cmd->add_option("--calibration", o.calibration,
                  "Text file whose tokens the layers are fitted on (its last quarter held out); "
                  "default: the run's task training text, with its validation text held out");
  cmd->add_option("--calibration-tokens", o.calibration_tokens, "Tokens to fit on")
      ->capture_default_str();
  cmd->add_option("--held-out-windows", o.held_out_windows, "Windows the errors are measured on")
      ->capture_default_str();
  cmd->add_option("--context", o.context,
                  "Tokens per calibration window (--calibration files; default the model's "
                  "context, at most 512)");
  cmd->add_option("--format", o.format, "text | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  return cmd;
}

int run_convert(const ConvertOptions& o, std::ostream& out, std::ostream& progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(o.out, ec) && !(fs::is_directory(o.out, ec) && fs::is_empty(o.out, ec))) {
    throw SpecError("out", "'" + o.out + "' already exists and is not an empty folder");
  }
  if (o.calibration_tokens < 1) throw SpecError("calibration-tokens", "must be >= 1");
  if (o.held_out_windows < 1) throw SpecError("held-out-windows", "must be >= 1");
  if (o.context < 0 || o.context == 1) throw SpecError("context", "must be >= 2");
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const nlohmann::json document = nn::read_checkpoint_config(dir);
  nn::TransformerModel source = nn::load_model(dir);
  const ModelShape& shape = source->config().shape;
  if (!shape.causal()) throw SpecError("checkpoint", dir + " is not a language model (decoder)");
  if (o.context > shape.max_context && shape.max_context > 0) {
    throw SpecError("context", fmt::format("{} exceeds the model's {} positions", o.context,
                                           shape.max_context));
  }
  convert::Calibration calibration;
  nlohmann::json task;
  if (!o.calibration.empty()) {
    calibration = file_calibration(dir, shape, o);
  } else {
    if (is_hf_config(document) || !document.contains("task")) {
      throw SpecError("calibration", dir +
                                         " has no training task to calibrate on: give the "
                                         "text with --calibration FILE");
    }
    task = document["task"];
    const std::unique_ptr<data::Task> t = data::task_from_json(task);
    if (o.context > 0) {
      throw SpecError("context", fmt::format("applies only to --calibration files (the task's "
                                             "windows are its {} tokens)",
                                             t->seq_len()));
    }
    if (t->metric() != data::Metric::kPerplexity) {
      throw SpecError("checkpoint", dir + "'s task is not a language model's");
    }
    calibration = convert::task_calibration(*t, o.calibration_tokens, o.held_out_windows);
  }
  if (task.is_null() && document.contains("task") && !is_hf_config(document)) {
    task = document["task"];
  }
  const bool show_progress = ::isatty(2) != 0 || o.format == "text";
  const convert::ConversionResult result =
      convert::convert_model(*source, o.attn, calibration, [&](const std::string& line) {
        if (show_progress) progress << "kvlab convert: " << line << "\n";
      });
  nlohmann::json extra = {
      {"converted_from", {{"checkpoint", dir}, {"report", result.report.to_json()}}}};
  if (!task.is_null()) extra["task"] = task;
  const fs::path parent = fs::path(o.out).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  nn::save_model(*result.model, o.out, extra);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    if (fs::exists(dir + "/" + name)) {
      write_file_atomic(o.out + "/" + name, read_file(dir + "/" + name, data::kMaxTextBytes));
    }
  }
  if (o.format == "json") {
    out << result.report.to_json().dump(2) << "\n";
  } else {
    print_report(result.report, source->config(), result.model->config(), o.out, out);
  }
  return 0;
}

}  // namespace kvlab
