#include "cli/export_command.h"

#include <filesystem>

#include "nn/checkpoint.h"
#include "nn/hf_checkpoint.h"
#include "spec/spec_error.h"

namespace kvlab {

CLI::App* add_export_command(CLI::App& app, ExportOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a kvlab run as a Hugging Face model folder: config.json, model.safetensors, "
      "generation_config.json, and for byte-level language models a tokenizer.json that encodes "
      "text to its bytes. Llama-style decoders with mha/gqa/mqa are written as LlamaForCausalLM "
      "(Qwen2ForCausalLM with q/k/v biases), which transformers and llama.cpp's converter load; "
      "every other variant as KvlabForCausalLM, which only kvlab loads (its config.json carries a "
      "\"kvlab\" block with the spec). `--checkpoint DIR` of eval, generate and analyze reads "
      "either kind back.\n"
      "  kvlab export --checkpoint runs/text/gqa --out exported/gqa");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint folder (or a run folder)")->required();
  cmd->add_option("--format", o.format, "hf (a Hugging Face model folder)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  cmd->add_option("--out", o.out, "Folder to create (must not exist, or be empty)")->required();
  return cmd;
}

int run_export(const ExportOptions& o, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(o.out, ec) && !(fs::is_directory(o.out, ec) && fs::is_empty(o.out, ec))) {
    throw SpecError("out", "'" + o.out + "' already exists and is not an empty folder");
  }
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const nn::TransformerModel model = nn::load_model(dir);
  if (model->config().shape.kind != ModelKind::kDecoder) {
    throw SpecError("checkpoint", dir + " is not a decoder (only language models are exported)");
  }
  const std::string architecture = nn::save_hf_model(*model, o.out);
  out << "exported " << dir << " as " << architecture << " to " << o.out << "\n";
  return 0;
}

}  // namespace kvlab
