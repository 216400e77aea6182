#include "cli/export_command.h"

#include <filesystem>

#include "nn/checkpoint.h"
#include "nn/gguf_export.h"
#include "nn/hf_checkpoint.h"
#include "spec/spec_error.h"

namespace kvlab {

CLI::App* add_export_command(CLI::App& app, ExportOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a kvlab run as a Hugging Face model folder: config.json, model.safetensors, "
      "generation_config.json, and for byte-level language models a tokenizer.json that encodes "
      "text to its bytes. Llama-style decoders with mha/gqa/mqa are written as LlamaForCausalLM "
      "(Qwen2ForCausalLM with q/k/v biases, Qwen3ForCausalLM with qknorm), mla as "
      "DeepseekV2ForCausalLM or DeepseekV3ForCausalLM (by its router), GPT-2 style decoders "
      "(LayerNorm, GELU, biases, learned positions) with mha as GPT2LMHeadModel, which "
      "transformers and llama.cpp's converter load; every other variant as KvlabForCausalLM, "
      "which only kvlab "
      "loads (its config.json carries a \"kvlab\" block with the spec). `--checkpoint DIR` of "
      "eval, generate and analyze reads either kind back.\n"
      "--format gguf writes one GGUF v3 file for llama.cpp (architectures llama, qwen2, qwen3: "
      "Llama-style decoders with mha/gqa/mqa; deepseek2: dense DeepSeek-V2-style mla; with the "
      "byte vocabulary; other variants are refused with the reason).\n"
      "  kvlab export --checkpoint runs/text/gqa --out exported/gqa\n"
      "  kvlab export --checkpoint runs/text/gqa --format gguf --out gqa.gguf");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint folder (or a run folder)")->required();
  cmd->add_option("--format", o.format, "hf (a Hugging Face model folder) | gguf (llama.cpp)")
      ->check(CLI::IsMember({"hf", "gguf"}))
      ->capture_default_str();
  cmd->add_option("--out", o.out,
                  "hf: folder to create (must not exist, or be empty); gguf: the file to write "
                  "(must not exist)")
      ->required();
  cmd->add_option("--dtype", o.dtype,
                  "gguf: f32 | f16 | bf16 | q8_0 | q4_0 for the matrices (norms stay f32; under "
                  "q8_0 or q4_0 a matrix whose rows are not whole blocks of 32 is written f16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  return cmd;
}

int run_export(const ExportOptions& o, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.format == "gguf" && fs::exists(o.out, ec)) {
    throw SpecError("out", "'" + o.out + "' already exists");
  }
  if (fs::exists(o.out, ec) && !(fs::is_directory(o.out, ec) && fs::is_empty(o.out, ec))) {
    throw SpecError("out", "'" + o.out + "' already exists and is not an empty folder");
  }
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const nn::TransformerModel model = nn::load_model(dir);
  if (model->config().shape.kind != ModelKind::kDecoder) {
    throw SpecError("checkpoint", dir + " is not a decoder (only language models are exported)");
  }
  if (o.format == "gguf") {
    const GgmlType type = o.dtype == "f32"    ? GgmlType::kF32
                          : o.dtype == "f16"  ? GgmlType::kF16
                          : o.dtype == "q8_0" ? GgmlType::kQ8_0
                          : o.dtype == "q4_0" ? GgmlType::kQ4_0
                                              : GgmlType::kBF16;
    const GgufWriter file = nn::gguf_for(*model, type);
    file.write(o.out);
    std::string arch;
    for (const auto& [key, value] : file.metadata()) {
      if (key == "general.architecture") arch = std::get<std::string>(value);
    }
    out << "exported " << dir << " as GGUF (" << arch << ", " << o.dtype << ", "
        << file.tensors().size() << " tensors) to " << o.out << "\n";
    return 0;
  }
  const std::string architecture = nn::save_hf_model(*model, o.out);
  out << "exported " << dir << " as " << architecture << " to " << o.out << "\n";
  return 0;
}

}  // namespace kvlab
