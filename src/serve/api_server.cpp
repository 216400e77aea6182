#include "serve/api_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "serve/page.h"
#include "serve/text_stream.h"
#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

using Clock = std::chrono::steady_clock;

// The API's finish_reason: vLLM's "abort" for a request the server ended (the metrics' label
// for it is "cancelled").
const char* finish_name(FinishReason reason) {
  return reason == FinishReason::kCancelled ? "abort" : finish_reason_name(reason);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(e.json(), "application/json");
}

struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/v1/completions", "POST"},
                             {"/v1/chat/completions", "POST"},
                             {"/v1/models", "GET"},
                             {"/health", "GET"},
                             {"/metrics", "GET"},
                             {"/info", "GET"},
                             {"/", "GET"}};

}  // namespace

// cpp-httplib's server with its listening socket reachable (ApiServer::bind).
class ApiServer::Http : public httplib::Server {
 public:
  int listening_socket() const { return svr_sock_; }
};

// A request between its handler thread and the engine thread.
struct ApiServer::Pending {
  uint64_t id = 0;
  std::mutex mutex;
  std::condition_variable cv;
  bool decided = false;             // admitted or refused by the engine
  std::optional<ApiError> refused;  // engine.submit's refusal
  std::deque<int64_t> tokens;       // produced, not yet taken by the handler
  std::optional<FinishReason> finish;

  // Waits up to `wait` for news; moves the tokens out. Returns the finish reason once ended.
  std::optional<FinishReason> take(std::vector<int64_t>& out, Clock::duration wait) {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, wait, [&] { return !tokens.empty() || finish.has_value(); });
    out.assign(tokens.begin(), tokens.end());
    tokens.clear();
    return finish;
  }
};

struct ApiServer::Submission {
  std::vector<int64_t> prompt;
  RequestLimits limits;
  RequestSampling sampling;
  std::shared_ptr<Pending> pending;
};

ApiServer::ApiServer(StepEngine& engine, TextCodec codec, ChatTemplate chat, ServerOptions options,
                     std::ostream& log)
    : engine_(engine),
      codec_(std::move(codec)),
      chat_(std::move(chat)),
      options_(std::move(options)),
      log_(log),
      http_(std::make_unique<Http>()),
      seeds_(std::random_device{}()) {
  max_model_len_ = engine_.max_model_len();
  vocab_size_ = engine_.vocab_size();
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  metrics_ = engine_.metrics();
  route(*http_);
}

ApiServer::~ApiServer() = default;

void ApiServer::bind() {
  bool bound = false;
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    bound = port_ > 0;
  } else {
    port_ = options_.port;
    bound = http_->bind_to_port(options_.host, options_.port);
  }
  if (!bound) {
    throw SpecError("port", "cannot listen on " + options_.host + ":" +
                                std::to_string(options_.port) +
                                " (in use, or not an address of this machine)");
  }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections overflows it and
  // the kernel drops their SYNs, which the clients resend a second later. listen() again on the
  // bound socket raises the backlog (Linux).
  if (::listen(http_->listening_socket(), SOMAXCONN) != 0) {
    throw SpecError("port", std::string("cannot listen: ") + std::strerror(errno));
  }
}

void ApiServer::route(httplib::Server& http) {
  const int threads = options_.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  const auto read_timeout = std::chrono::duration<double>(options_.read_timeout_s);
  http.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const Route* route = nullptr;
    for (const Route& r : kRoutes) {
      if (req.path == r.path) route = &r;
    }
    if (route == nullptr) {
      send_error(res, ApiError(404,
                               "no route " + req.method + " " + req.path +
                                   " (routes: POST /v1/completions, POST "
                                   "/v1/chat/completions, GET /v1/models, /health, /metrics)",
                               "", "not_found"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != route->method &&
        !(req.method == "HEAD" && route->method == std::string("GET"))) {
      res.set_header("Allow", route->method);
      send_error(res, ApiError(405,
                               req.method + " is not allowed on " + req.path + " (use " +
                                   route->method + ")",
                               "", "method_not_allowed"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && req.path.rfind("/v1/", 0) == 0 &&
        req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      send_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "",
                               "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own errors (a body over the limit, a malformed request line) in OpenAI's shape
  http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    std::string message = "HTTP error " + std::to_string(res.status);
    if (res.status == 413) {
      message = "the request body is larger than this server's limit of " +
                std::to_string(options_.max_body_bytes) + " bytes";
    } else if (res.status == 400) {
      message = "malformed HTTP request";
    }
    send_error(res, ApiError(res.status, message));
  });
  http.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log_ << "kvlab serve: internal error: " << what << "\n";
        send_error(res, ApiError(500, "internal error: " + what));
      });

  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, false);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, true);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const nlohmann::json model = {{"id", options_.model_name},   {"object", "model"},
                                  {"created", created_},         {"owned_by", "kvlab"},
                                  {"root", options_.model_name}, {"max_model_len", max_model_len_}};
    res.set_content(nlohmann::json{{"object", "list"}, {"data", {model}}}.dump(),
                    "application/json");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http.Get("/info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(options_.info_json, "application/json");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = index_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    EngineMetrics snapshot;
    {
      std::lock_guard lock(metrics_mutex_);
      snapshot = metrics_;
    }
    res.set_content(render_prometheus(snapshot), "text/plain; version=0.0.4; charset=utf-8");
  });
}

std::shared_ptr<ApiServer::Pending> ApiServer::start(const CompletionRequest& r,
                                                     int64_t& prompt_tokens) {
  std::vector<int64_t> prompt;
  try {
    if (r.chat) {
      prompt = codec_.encode(render_chat(chat_, r.messages), false);
    } else if (r.prompt_ids) {
      prompt = *r.prompt_ids;
    } else {
      prompt = codec_.encode(r.prompt, true);
    }
  } catch (const SpecError& e) {
    throw ApiError(400, e.what(), r.chat ? "messages" : "prompt");
  }
  prompt_tokens = static_cast<int64_t>(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= vocab_size_) {
      throw ApiError(400,
                     "prompt[" + std::to_string(i) + "]: token id " + std::to_string(prompt[i]) +
                         " is outside the model's vocabulary of " + std::to_string(vocab_size_),
                     "prompt");
    }
  }
  Submission s;
  s.limits.max_tokens =
      r.max_tokens.value_or(r.chat ? max_model_len_ - prompt_tokens : options_.default_max_tokens);
  if (s.limits.max_tokens < 1) {
    throw ApiError(400,
                   "the prompt's " + std::to_string(prompt_tokens) +
                       " tokens leave no room to generate in this model's " +
                       std::to_string(max_model_len_) + " (max_model_len)",
                   r.chat ? "messages" : "prompt", "context_length_exceeded");
  }
  s.limits.stop_token_ids = r.stop_token_ids;
  if (codec_.eos_id && !r.ignore_eos) s.limits.stop_token_ids.push_back(*codec_.eos_id);
  s.sampling.sampling = {r.temperature, r.top_k, r.top_p};
  s.prompt = std::move(prompt);
  s.pending = std::make_shared<Pending>();
  std::shared_ptr<Pending> pending = s.pending;
  {
    std::lock_guard lock(inbox_mutex_);
    if (draining_) throw ApiError(503, "the server is shutting down", "", "shutting_down");
    pending->id = next_id_++;
    s.sampling.seed = r.seed ? static_cast<uint64_t>(*r.seed) : seeds_();
    submissions_.push_back(std::move(s));
  }
  inbox_cv_.notify_one();
  std::unique_lock lock(pending->mutex);
  pending->cv.wait(lock, [&] { return pending->decided; });
  if (pending->refused) throw *pending->refused;
  return pending;
}

void ApiServer::cancel(uint64_t id, FinishReason reason) {
  {
    std::lock_guard lock(inbox_mutex_);
    cancels_.emplace_back(id, reason);
  }
  inbox_cv_.notify_one();
}

void ApiServer::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  // a response counts until it is written (a stream: until httplib releases its provider)
  auto responses =
      std::shared_ptr<std::atomic<int64_t>>(&responses_, [](std::atomic<int64_t>* n) { --*n; });
  ++responses_;
  try {
    const CompletionRequest r = parse_completion_request(req.body, chat);
    if (!r.model.empty() && r.model != options_.model_name) {
      throw ApiError(404,
                     "the model \"" + r.model + "\" does not exist here (this server serves \"" +
                         options_.model_name + "\")",
                     "model", "model_not_found");
    }
    int64_t prompt_tokens = 0;
    std::shared_ptr<Pending> pending = start(r, prompt_tokens);
    CompletionText c;
    c.id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(created_) + "-" +
           std::to_string(pending->id);
    c.model = options_.model_name;
    c.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    c.prompt_tokens = prompt_tokens;

    // The text of the next tokens; sets c.finish_reason when the request has ended (its own end,
    // or a stop string, which cancels it in the engine).
    struct Progress {
      std::shared_ptr<Pending> pending;
      TextStream text;
      CompletionText c;
      bool first = true, ended = false;
    };
    auto p = std::make_shared<Progress>(Progress{pending, TextStream(codec_.decode, r.stop), c});
    // the text of each new token that has some (a stream sends one event a token, as vLLM)
    auto advance = [this](Progress& progress, Clock::duration wait) {
      std::vector<int64_t> tokens;
      const std::optional<FinishReason> finish = progress.pending->take(tokens, wait);
      std::vector<std::string> pieces;
      auto add = [&](std::string piece) {
        if (!piece.empty()) pieces.push_back(std::move(piece));
      };
      for (const int64_t token : tokens) {
        ++progress.c.completion_tokens;
        add(progress.text.push(token));
        if (progress.text.stopped()) {
          cancel(progress.pending->id, FinishReason::kStop);
          progress.c.finish_reason = "stop";
          progress.ended = true;
          break;
        }
      }
      if (!progress.ended && finish && tokens.empty()) {
        add(progress.text.finish());
        progress.c.finish_reason = finish_name(*finish);
        progress.ended = true;
      }
      return pieces;
    };

    if (!r.stream) {
      std::string text;
      while (!p->ended) {
        for (const std::string& piece : advance(*p, std::chrono::seconds(1))) text += piece;
      }
      p->c.text = std::move(text);
      res.set_content(completion_json(p->c, chat), "application/json");
      return;
    }
    const bool include_usage = r.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, p, chat, include_usage, advance](size_t, httplib::DataSink& sink) {
          auto event = [&](const std::string& json) {
            const std::string line = "data: " + json + "\n\n";
            return sink.write(line.data(), line.size());
          };
          if (p->first && chat) {
            CompletionText role = p->c;
            role.text.clear();
            if (!event(completion_chunk_json(role, chat, true))) return false;
          }
          p->first = false;
          for (const std::string& delta : advance(*p, std::chrono::seconds(1))) {
            CompletionText piece = p->c;
            piece.text = delta;
            piece.finish_reason.reset();
            if (!event(completion_chunk_json(piece, chat, false))) return false;
          }
          if (!p->ended) return sink.is_writable();
          CompletionText last = p->c;
          last.text.clear();
          if (!event(completion_chunk_json(last, chat, false))) return false;
          if (include_usage && !event(usage_chunk_json(p->c, chat))) return false;
          const std::string done = "data: [DONE]\n\n";
          if (!sink.write(done.data(), done.size())) return false;
          sink.done();
          return true;
        },
        [this, p, responses](bool success) {
          // the client went away (or the write timed out) before the request ended
          if (!success && !p->ended) cancel(p->pending->id, FinishReason::kCancelled);
        });
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void ApiServer::take_inbox(bool aborting) {
  std::vector<Submission> submissions;
  std::vector<std::pair<uint64_t, FinishReason>> cancels;
  {
    std::lock_guard lock(inbox_mutex_);
    submissions.swap(submissions_);
    cancels.swap(cancels_);
  }
  for (Submission& s : submissions) {
    Pending& p = *s.pending;
    std::optional<ApiError> refused;
    if (failed_) {
      refused.emplace(500, "the engine failed", "", "engine_failed");
    } else {
      try {
        engine_.submit(p.id, std::move(s.prompt), std::move(s.limits), s.sampling,
                       options_.request_timeout_s);
        live_.emplace(p.id, s.pending);
      } catch (const RequestRefused& e) {
        refused.emplace(400, e.what(), "max_tokens", "context_length_exceeded");
      }
    }
    {
      std::lock_guard lock(p.mutex);
      p.decided = true;
      p.refused = std::move(refused);
    }
    p.cv.notify_all();
  }
  for (const auto& [id, reason] : cancels) engine_.cancel(id, reason);
  if (aborting) {
    for (const auto& [id, pending] : live_) engine_.cancel(id, FinishReason::kCancelled);
  }
}

void ApiServer::publish_metrics() {
  EngineMetrics m = engine_.metrics();
  std::lock_guard lock(metrics_mutex_);
  metrics_ = std::move(m);
}

void ApiServer::serve(const std::atomic<bool>& stop) {
  std::thread listener([&] { http_->listen_after_bind(); });
  auto finish = [this](uint64_t id, FinishReason reason) {
    const auto found = live_.find(id);
    if (found == live_.end()) return;
    Pending& p = *found->second;
    {
      std::lock_guard lock(p.mutex);
      p.finish = reason;
    }
    p.cv.notify_all();
    live_.erase(found);
  };
  // Stopping: new requests are answered 503 while the ones in flight finish (httplib's own stop
  // would cut a stream short), up to the deadline; then the rest end as "abort", every response
  // is written, and the socket closes.
  bool stopping = false;
  Clock::time_point deadline;
  try {
    for (;;) {
      if (!stopping && stop.load()) {
        stopping = true;
        {
          std::lock_guard lock(inbox_mutex_);
          draining_ = true;
        }
        log_ << "kvlab serve: stopping: " << live_.size() << " requests in flight get "
             << options_.shutdown_timeout_s << " s to finish\n";
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.shutdown_timeout_s));
      }
      take_inbox(stopping && Clock::now() >= deadline);
      if (engine_.idle()) {
        publish_metrics();
        if (stopping && live_.empty() && responses_ == 0) break;
        std::unique_lock lock(inbox_mutex_);
        inbox_cv_.wait_for(lock, std::chrono::milliseconds(20),
                           [&] { return !submissions_.empty() || !cancels_.empty(); });
        continue;
      }
      const StepResult step = engine_.step();
      for (const TokenEvent& e : step.events) {
        const auto found = live_.find(e.id);
        if (found == live_.end()) continue;
        {
          std::lock_guard lock(found->second->mutex);
          found->second->tokens.push_back(e.token);
        }
        found->second->cv.notify_all();
        if (e.finished) finish(e.id, *e.finished);
      }
      for (const RequestId id : step.cancelled) finish(id, FinishReason::kCancelled);
      publish_metrics();
    }
  } catch (const std::exception& e) {
    log_ << "kvlab serve: the engine failed: " << e.what() << "; ending every request\n";
    {
      std::lock_guard lock(inbox_mutex_);
      draining_ = true;
      failed_ = true;
    }
    while (!live_.empty()) finish(live_.begin()->first, FinishReason::kCancelled);
    while (responses_ > 0) {
      take_inbox(false);  // refuses what arrived: each waiting handler gets its answer
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    http_->stop();
    listener.join();
    throw;
  }
  http_->stop();
  listener.join();
  log_ << "kvlab serve: stopped\n";
}

}  // namespace kvlab::serve
