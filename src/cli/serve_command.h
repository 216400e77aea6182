#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <ostream>
#include <string>

namespace kvlab {

struct ServeOptions {
  std::string checkpoint;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string kv_cache_memory = "1GiB";
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 256;
  int64_t max_batch_tokens = 2048;
  bool no_prefix_cache = false;
  std::string cache_dtype = "bf16";
  std::string weight_dtype = "auto";
  std::string attn_precision = "auto";
  int threads = 0;
  std::string served_model_name;
  std::string api_key;
  std::string chat_template;
  int http_threads = 512;
  std::string max_body = "4MiB";
  double read_timeout_s = 10;
  double request_timeout_s = 0;
  double shutdown_timeout_s = 10;
};

// `kvlab serve`: the OpenAI-compatible server over the continuous-batching engine (src/serve).
CLI::App* add_serve_command(CLI::App& app, ServeOptions& options);
// Serves until *stop (SIGINT / SIGTERM), then ends in-flight requests and returns 0.
int run_serve(const ServeOptions& options, const std::atomic<bool>& stop, std::ostream& log);

}  // namespace kvlab
