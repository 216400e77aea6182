#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <ostream>
#include <string>

namespace kvlab {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  int64_t max_tokens = 64;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  std::string cache_dtype = "f32";
  std::string weight_dtype = "auto";
  std::string rope_dtype;         // the cache's rope stream, where not bf16 under q8_0/q4_0/fp8
  std::string precision = "f32";  // attention arithmetic of the decode step
  bool no_cache = false;
  bool timings = false;  // load, prompt and generation times on stderr
  int threads = 0;
};

// `kvlab generate`: continues a prompt with a byte-level text checkpoint, decoding through
// the paged cache (or, with --no-cache, recomputing the full forward for every token).
CLI::App* add_generate_command(CLI::App& app, GenerateOptions& options);
// Exit status 0, or 130 when *stop became true (the text so far is printed).
int run_generate(const GenerateOptions& options, const std::atomic<bool>* stop, std::ostream& out);

}  // namespace kvlab
