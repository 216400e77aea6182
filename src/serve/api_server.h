#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "serve/chat_template.h"
#include "serve/openai_api.h"
#include "serve/step_engine.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvlab::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (ApiServer::port() says which)
  std::string model_name = "kvlab";
  std::string api_key;                        // "": none asked
  int64_t max_body_bytes = int64_t{4} << 20;  // larger bodies: 413
  int http_threads = 512;                     // connections served at once
  double read_timeout_s = 10;                 // a request not read in this long is dropped
  double request_timeout_s = 0;               // 0: none; else ended as "abort" when it runs over
  double shutdown_timeout_s = 10;             // in-flight requests get this long, then "abort"
  int64_t default_max_tokens = 16;            // completions without max_tokens (OpenAI's 16)
  // GET /info's JSON object: the model, its attention and cache arithmetic (the page shows it)
  std::string info_json = "{}";
};

// The served model's text: text -> tokens (with or without its special tokens) and back.
struct TextCodec {
  std::function<std::vector<int64_t>(const std::string& text, bool add_special_tokens)> encode;
  std::function<std::string(std::span<const int32_t>)> decode;
  std::optional<int64_t> eos_id;
};

// The OpenAI-compatible HTTP API over a StepEngine (serve/engine.h's Engine): POST /v1/completions
// and /v1/chat/completions (streamed as Server-Sent Events with stream: true), GET /v1/models,
// /health and /metrics (Prometheus text); GET / is a page over them (serve/page.h), GET /info its
// numbers. HTTP/1.1 is cpp-httplib's: a fixed pool of http_threads threads, one a connection while
// it is served. The engine runs on the thread that calls serve(); handlers hand it requests through
// an inbox and wait for their tokens, so the engine is never shared.
class ApiServer {
 public:
  ApiServer(StepEngine& engine, TextCodec codec, ChatTemplate chat, ServerOptions options,
            std::ostream& log);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds the socket (throws SpecError("port") naming the address where it cannot).
  void bind();
  int port() const { return port_; }
  // Serves until *stop turns true: then stops accepting, gives in-flight requests
  // shutdown_timeout_s to finish, ends the rest as "abort" (each answered) and returns.
  void serve(const std::atomic<bool>& stop);

 private:
  class Http;
  struct Pending;
  struct Submission;
  void route(httplib::Server& http);
  void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);
  std::shared_ptr<Pending> start(const CompletionRequest& request, int64_t& prompt_tokens);
  void cancel(uint64_t id, FinishReason reason);
  // the engine thread's work between steps: new requests, cancels, the shutdown deadline
  void take_inbox(bool aborting);
  void publish_metrics();

  StepEngine& engine_;
  TextCodec codec_;
  ChatTemplate chat_;
  ServerOptions options_;
  std::ostream& log_;
  std::unique_ptr<Http> http_;
  int port_ = 0;
  int64_t max_model_len_ = 0, vocab_size_ = 0;
  int64_t created_ = 0;

  std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  std::vector<Submission> submissions_;
  std::vector<std::pair<uint64_t, FinishReason>> cancels_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> draining_{false};
  bool failed_ = false;                // the engine threw: each request still submitted is refused
  std::atomic<int64_t> responses_{0};  // completions being answered
  std::mt19937_64 seeds_;              // seeds of requests that give none (under inbox_mutex_)

  std::map<uint64_t, std::shared_ptr<Pending>> live_;  // the engine thread's

  std::mutex metrics_mutex_;
  EngineMetrics metrics_;
};

}  // namespace kvlab::serve
