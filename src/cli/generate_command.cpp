#include "cli/generate_command.h"

#include <chrono>
#include <iomanip>
#include <iostream>

#include "cli/text_generator.h"
#include "report/units.h"

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
         "where the decoder has SIMD kernels, else f32), for the prompt and each step; norms, "
         "biases and embeddings stay f32")
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
  TextGenerator::check_request(o);
  using Clock = std::chrono::steady_clock;
  const auto load_start = Clock::now();
  const TextGenerator generator(o);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  const TextGenerator::Result generated = generator.generate(o, stopped);
  const infer::TextGenerationResult& result = generated.run;
  out << generated.text << "\n";
  if (o.timings) {
    const int64_t prompt_tokens = generated.prompt_tokens;
    // loading includes building the decode engine (weights repacked, cache allocated)
    const double engine_load_s = load_s + result.setup_s;
    if (!o.no_cache) {
      std::cerr << "weights " << dtype_name(generator.weight_dtype()) << ", "
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
