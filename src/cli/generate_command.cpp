#include "cli/generate_command.h"

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>

#include "experiments/eval_decode.h"
#include "infer/text_generation.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "report/units.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"

namespace kvlab {

CLI::App* add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Continue a prompt with a byte-level text checkpoint (kvlab train --task text or kjv)");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint folder (or a run folder)")->required();
  cmd->add_option("--prompt", o.prompt, "Text to continue")->required();
  cmd->add_option(
         "--max-tokens", o.max_tokens,
         "Tokens to generate (bytes for byte-level models); stops early at the tokenizer's EOS")
      ->capture_default_str();
  cmd->add_option(
         "--temperature", o.temperature,
         "softmax temperature; 0 (or anything below 1e-5, where logits ÷ T would overflow): "
         "greedy")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Sample among the k most likely (0: off)")
      ->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass in (0, 1] (1: off)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--cache-dtype", o.cache_dtype,
                  "f32 | bf16 | f16 | q8_0 | q4_0 | fp8 (q8_0, q4_0: ggml's blocks of 32 with an "
                  "f16 scale, read by the int8 kernels under --attn-precision int8 or auto; fp8: "
                  "e4m3 with an f32 scale per row; in f32 arithmetic these three decode with the "
                  "scalar attention kernel)")
      ->capture_default_str();
  cmd->add_option("--rope-dtype", o.rope_dtype,
                  "With --cache-dtype q8_0 | q4_0 | fp8: the dtype of that cache's rope stream "
                  "(gva with dr > 0, gta, mla; default bf16)");
  cmd->add_option("--attn-precision", o.precision,
                  "Attention arithmetic of the cached decode: f32 (exact to f32 sums), bf16 (bf16 "
                  "queries and weights, vdpbf16ps; needs AVX-512 BF16 and a bf16 cache to apply), "
                  "int8 (q8_0/q4_0 caches: the query rounded to q8_0, integer dot products) or "
                  "auto (int8 on q8_0/q4_0 caches, else bf16 where the CPU has it)")
      ->capture_default_str();
  cmd->add_option(
         "--weight-dtype", o.weight_dtype,
         "How the cached decode stores the dense layers' matrices: f32 | bf16 | f16 | q8_0 "
         "| q4_0 (ggml's blocks; the activations rounded to q8_0 per block) | auto (bf16 "
         "where the decoder has SIMD kernels, else f32); norms, biases and embeddings stay "
         "f32, and the prompt's batched pass uses the model's f32 weights")
      ->capture_default_str();
  cmd->add_flag("--no-cache", o.no_cache, "Recompute the full forward for every token (reference)");
  cmd->add_flag("--timings", o.timings,
                "Print the load time, the prompt's and the generated tokens' times and tokens/s "
                "to stderr");
  cmd->add_option("--threads", o.threads, "Threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  return cmd;
}

int run_generate(const GenerateOptions& o, const std::atomic<bool>* stop, std::ostream& out) {
  if (o.max_tokens < 0) throw SpecError("max_tokens", "must be >= 0");
  if (o.max_tokens > (int64_t{1} << 31)) throw SpecError("max_tokens", "must be <= 2^31");
  if (o.temperature < 0) throw SpecError("temperature", "must be >= 0 (0: greedy)");
  if (o.top_k < 0) throw SpecError("top_k", "must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw SpecError("top_p", "must be in (0, 1]");
  if (o.prompt.empty()) throw SpecError("prompt", "must not be empty");
  DType dtype = DType::kF32;
  try {
    dtype = parse_dtype(o.cache_dtype);
  } catch (const SpecError& e) {
    throw SpecError("cache_dtype", std::string(e.what()).substr(e.field().size() + 2));
  }
  const DType weight_dtype = parse_weight_dtype_flag(o.weight_dtype);
  const int threads = nn::set_threads(o.threads);
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto load_start = Clock::now();
  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  nn::TransformerModel model = nn::load_model(dir);
  if (!o.rope_dtype.empty() && o.no_cache) {
    throw SpecError("rope-dtype", "--no-cache keeps no cache to set a rope stream of");
  }
  const std::optional<DType> rope_dtype =
      parse_rope_dtype_flag(o.rope_dtype, model->config().attn, dtype);
  const ModelShape& shape = model->config().shape;
  // A folder's tokenizer.json (Hugging Face folders, kvlab exports) turns text into tokens;
  // without one, the model must read bytes.
  std::optional<tok::Tokenizer> tokenizer;
  if (std::filesystem::exists(dir + "/tokenizer.json"))
    tokenizer.emplace(tok::Tokenizer::load(dir));
  if (!shape.causal() || (!tokenizer && shape.vocab_size != 256)) {
    throw SpecError("checkpoint", dir +
                                      " is not a language model with a tokenizer.json or a "
                                      "byte vocabulary (train one with --task text)");
  }
  std::vector<int64_t> tokens;
  if (tokenizer) {
    for (const int32_t id : tokenizer->encode(o.prompt, /*add_special_tokens=*/true)) {
      tokens.push_back(id);
    }
  } else {
    for (const unsigned char ch : o.prompt) tokens.push_back(ch);
  }
  const int64_t total = static_cast<int64_t>(tokens.size()) + o.max_tokens;
  if (!o.no_cache) {
    require_memory("max_tokens",
                   "a cache for prompt + max-tokens = " + std::to_string(total) + " tokens",
                   [&] { return model->config().cache_bytes(total, 1); });
  }
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  if (shape.pos == PosScheme::kLearned && total > shape.max_context) {
    throw SpecError("max_tokens", "prompt + max-tokens = " + std::to_string(total) +
                                      " exceeds the model's " + std::to_string(shape.max_context) +
                                      " learned positions");
  }
  const double load_s = seconds_since(load_start);
  infer::TextGenerationOptions generation;
  generation.max_tokens = o.max_tokens;
  generation.sampling = {o.temperature, o.top_k, o.top_p};
  generation.seed = o.seed;
  generation.eos_id = tokenizer ? tokenizer->eos_id() : std::nullopt;
  generation.use_cache = !o.no_cache;
  generation.cache_dtype = dtype;
  generation.rope_dtype = rope_dtype;
  generation.attn_precision = o.precision;
  generation.weight_dtype = weight_dtype;
  generation.threads = threads;
  const infer::TextGenerationResult result =
      infer::generate_text_tokens(model, tokens, generation, stopped);
  const std::vector<int32_t>& generated = result.tokens;
  std::string text;
  if (tokenizer) {
    text = tokenizer->decode(generated, /*skip_special_tokens=*/true);
  } else {
    for (const int32_t id : generated) text += static_cast<char>(id);
  }
  out << text << "\n";
  if (o.timings) {
    const int64_t prompt_tokens = static_cast<int64_t>(tokens.size());
    // loading includes building the decode engine (weights repacked, cache allocated)
    const double engine_load_s = load_s + result.setup_s;
    if (!o.no_cache) {
      std::cerr << "weights " << dtype_name(weight_dtype) << ", "
                << format_bytes(result.weight_bytes, ByteUnits::kIec) << " read a token; ";
    }
    std::cerr << std::fixed << std::setprecision(2) << "load " << engine_load_s << " s; prompt "
              << prompt_tokens << " tokens " << result.prompt_s << " s ("
              << (result.prompt_s > 0 ? static_cast<double>(prompt_tokens) / result.prompt_s : 0.0)
              << " tokens/s); " << result.decode_steps << " decode steps " << result.decode_s
              << " s ("
              << (result.decode_s > 0 ? static_cast<double>(result.decode_steps) / result.decode_s
                                      : 0.0)
              << " tokens/s)\n";
  }
  return stopped() ? 130 : 0;
}

}  // namespace kvlab
