#include "cli/serve_command.h"

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "experiments/eval_decode.h"
#include "kernels/decode_attention.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "report/units.h"
#include "serve/api_server.h"
#include "serve/engine.h"
#include "serve/kv_budget.h"
#include "spec/memory_budget.h"
#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvlab {

CLI::App* add_serve_command(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve a checkpoint over an OpenAI-compatible HTTP API (POST /v1/completions, "
      "/v1/chat/completions; GET /v1/models, /health, /metrics; a page at /) with continuous "
      "batching, prefix caching and preemption. Stops on Ctrl-C or SIGTERM, ending requests in "
      "flight");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "A kvlab checkpoint or run folder, or a Hugging Face folder (config.json, "
                  "model.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--host", o.host, "Address to listen on (127.0.0.1: this machine only)")
      ->capture_default_str();
  cmd->add_option("--port", o.port, "TCP port (0: any free one, printed at startup)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", o.kv_cache_memory,
                  "Memory of the KV cache's page pool: 2GiB, 512MiB, 1.5GB, bytes, or a fraction "
                  "of this machine's memory (0.25)")
      ->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len,
                  "Prompt + generated tokens of one request, at most (0: the model's context)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Sequences in the running batch, at most")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", o.max_batch_tokens,
                  "Tokens one engine step computes, at most (decode tokens + prompt chunks)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", o.no_prefix_cache,
                "Do not share the pages of common prompt prefixes between requests");
  cmd->add_option("--cache-dtype", o.cache_dtype,
                  "KV cache dtype: f32 | bf16 | f16 | q8_0 | q4_0 | fp8")
      ->capture_default_str();
  cmd->add_option("--weight-dtype", o.weight_dtype,
                  "The decode step's dense-layer matrices: f32 | bf16 | f16 | q8_0 | q4_0 | auto "
                  "(bf16 where the decoder has SIMD kernels, else f32), for prompts and decoding "
                  "alike")
      ->capture_default_str();
  cmd->add_option("--attn-precision", o.attn_precision,
                  "Attention arithmetic of the cached decode: f32, bf16 (bf16 caches, AVX-512 "
                  "BF16), int8 (q8_0/q4_0 caches: the query rounded to q8_0, integer dot "
                  "products) or auto (int8 on q8_0/q4_0 caches, else bf16 where the CPU has it)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "Compute threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--served-model-name", o.served_model_name,
                  "The model's name in the API (default: the checkpoint folder's name)");
  cmd->add_option("--api-key", o.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/ routes (401 without it)");
  cmd->add_option("--chat-template", o.chat_template,
                  "chatml (qwen) | llama3 | llama2 | deepseek | plain (default: detected from "
                  "tokenizer_config.json; plain for a folder without one)");
  cmd->add_option("--http-threads", o.http_threads,
                  "Connections served at once (a thread each; more wait for one)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--max-body", o.max_body, "Largest request body (larger: 413)")
      ->capture_default_str();
  cmd->add_option("--read-timeout", o.read_timeout_s,
                  "Seconds a client may take to send its request")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_s,
                  "Seconds a request may run before it ends with finish_reason \"abort\" (0: no "
                  "limit)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o.shutdown_timeout_s,
                  "On SIGINT/SIGTERM: seconds requests in flight get to finish before they end "
                  "with \"abort\"")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  return cmd;
}

int run_serve(const ServeOptions& o, const std::atomic<bool>& stop, std::ostream& log) {
  const DType dtype = parse_dtype(o.cache_dtype, "cache-dtype");
  const DType weight_dtype = parse_weight_dtype_flag(o.weight_dtype);
  const int64_t budget_bytes = serve::parse_memory_budget(o.kv_cache_memory, "kv-cache-memory");
  require_memory_bytes("kv-cache-memory", "a KV cache of " + o.kv_cache_memory,
                       Exact(budget_bytes));
  const int64_t max_body = serve::parse_memory_budget(o.max_body, "max-body");
  if (max_body < 1024) throw SpecError("max-body", "must be at least 1 KiB");

  const std::string dir = nn::checkpoint_dir(o.checkpoint);
  const int threads = nn::set_threads(o.threads);
  nn::TransformerModel model = nn::load_model(dir);
  const ModelConfig config = model->config();  // a copy: the engine takes the model
  if (!config.shape.causal()) throw SpecError("checkpoint", dir + " is not a language model");

  serve::TextCodec codec;
  std::optional<tok::Tokenizer> tokenizer;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    tokenizer.emplace(tok::Tokenizer::load(dir));
    if (tokenizer->vocab_size() > config.shape.vocab_size) {
      throw SpecError("tokenizer", "tokenizer.json has " + std::to_string(tokenizer->vocab_size()) +
                                       " tokens, the model " +
                                       std::to_string(config.shape.vocab_size));
    }
    const tok::Tokenizer* t = &*tokenizer;
    codec.encode = [t](const std::string& text, bool special) {
      const std::vector<int32_t> ids = t->encode(text, special);
      return std::vector<int64_t>(ids.begin(), ids.end());
    };
    codec.decode = [t](std::span<const int32_t> ids) { return t->decode(ids, true); };
    if (t->eos_id()) codec.eos_id = *t->eos_id();
  } else if (config.shape.vocab_size == 256) {
    codec.encode = [](const std::string& text, bool) {
      return std::vector<int64_t>(text.begin(), text.end());
    };
    // bytes are tokens; UTF-8 is what the API returns
    codec.decode = [](std::span<const int32_t> ids) {
      std::string bytes(ids.begin(), ids.end());
      return tok::utf8_with_replacement(bytes);
    };
  } else {
    throw SpecError("checkpoint", dir + " has no tokenizer.json and no byte vocabulary");
  }
  const serve::ChatTemplate chat = serve::load_chat_template(dir, o.chat_template);

  AttentionSpec spec = config.attn;
  spec.cache_dtype = dtype;
  const CacheLayout layout = spec.cache_layout();
  const int64_t max_model_len = o.max_model_len > 0 ? o.max_model_len : config.shape.max_context;
  if (max_model_len <= 0) throw SpecError("max-model-len", "the model states no context: give one");
  if (config.shape.pos == PosScheme::kLearned && max_model_len > config.shape.max_context) {
    throw SpecError("max-model-len", "the model has " + std::to_string(config.shape.max_context) +
                                         " learned positions");
  }
  constexpr int64_t kPageSize = infer::Generator::kPageSize;
  const serve::KvBudget budget =
      serve::plan_kv_budget(layout, config.shape.n_layers, budget_bytes, kPageSize, max_model_len);

  serve::EngineOptions engine_options;
  engine_options.max_model_len = max_model_len;
  const serve::EngineSizing sizing = serve::size_engine(budget, o.max_num_seqs);
  engine_options.n_pages = sizing.n_pages;
  engine_options.max_num_seqs = sizing.max_num_seqs;
  engine_options.max_batch_tokens = o.max_batch_tokens;
  engine_options.prefix_caching = !o.no_prefix_cache;
  engine_options.cache_dtype = dtype;
  engine_options.weight_dtype = weight_dtype;
  engine_options.attn_precision = o.attn_precision;
  engine_options.threads = threads;
  std::string model_name = o.served_model_name;
  if (model_name.empty()) {
    model_name = std::filesystem::path(o.checkpoint).lexically_normal().filename().string();
    if (model_name.empty()) model_name = std::filesystem::path(dir).filename().string();
  }
  // the startup lines, printed once the socket is bound (an error is the first line otherwise)
  std::vector<std::string> startup = {
      model_name + " (" + config.attn.to_string() + ", " + std::to_string(config.shape.n_layers) +
      " layers, " + std::to_string(config.shape.vocab_size) + " tokens, cache " +
      std::string(dtype_name(dtype)) + ", " + std::to_string(threads) + " threads, chat template " +
      serve::chat_format_name(chat.format) + ")"};
  for (const std::string& line : serve::describe_kv_budget(budget)) startup.push_back(line);
  serve::Engine engine(std::move(model), engine_options);
  const int64_t weight_bytes = engine.generator().decode_model().weights().bytes_read_per_token();
  const std::string precision =
      attn_precision_name(engine.generator().decode_model().attn_precision());
  startup.push_back("weights " + std::string(dtype_name(weight_dtype)) + ": " +
                    format_bytes(weight_bytes, ByteUnits::kIec) +
                    " read by a decode step; attention arithmetic " + precision);

  serve::ServerOptions server_options;
  server_options.host = o.host;
  server_options.port = o.port;
  server_options.model_name = model_name;
  server_options.api_key = o.api_key;
  server_options.max_body_bytes = max_body;
  server_options.http_threads = o.http_threads;
  server_options.read_timeout_s = o.read_timeout_s;
  server_options.request_timeout_s = o.request_timeout_s;
  server_options.shutdown_timeout_s = o.shutdown_timeout_s;
  server_options.info_json = nlohmann::json{
      {"model", model_name},
      {"attn", config.attn.to_string()},
      {"layers", config.shape.n_layers},
      {"d_model", config.shape.d_model},
      {"heads", config.shape.n_heads},
      {"vocab_size", config.shape.vocab_size},
      {"cache_dtype", std::string(dtype_name(dtype))},
      {"weight_dtype", std::string(dtype_name(weight_dtype))},
      {"weight_bytes", weight_bytes},
      {"attn_precision", precision},
      {"bytes_per_token", budget.bytes_per_token},
      {"page_size", budget.page_size},
      {"pages", engine_options.n_pages},
      {"tokens", budget.tokens},
      {"budget_bytes", budget.budget_bytes},
      {"max_model_len", max_model_len},
      {"max_concurrency",
       budget.max_concurrency}}.dump();
  serve::ApiServer server(engine, std::move(codec), chat, server_options, log);
  server.bind();
  for (const std::string& line : startup) log << "kvlab serve: " << line << "\n";
  // a client that goes away mid-response is a failed write, not the end of the server
  std::signal(SIGPIPE, SIG_IGN);
  log << "kvlab serve: listening on http://" << o.host << ":" << server.port()
      << " (Ctrl-C to stop)" << std::endl;
  server.serve(stop);
  return 0;
}

}  // namespace kvlab
