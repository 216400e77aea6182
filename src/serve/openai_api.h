#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab::serve {

// An error the HTTP API answers with, shaped as OpenAI's: {"error": {"message", "type", "param",
// "code"}} with the status (400 a bad request, 401 no or a wrong key, 404, 405, 413, 503).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // "invalid_request_error", "authentication_error", "not_found_error", ... by status
  std::string type() const;
  std::string json() const;

 private:
  int status_;
  std::string param_, code_;
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// A POST /v1/completions or /v1/chat/completions body, checked: every field known to OpenAI's API
// that kvlab does not implement is refused unless it has its no-op value (n 1, echo false,
// penalties 0, ...), and an unknown field is refused, each naming the field (ApiError 400).
// vLLM's extensions top_k, stop_token_ids and ignore_eos are accepted.
struct CompletionRequest {
  bool chat = false;
  std::string model;
  // completions: the prompt as text, or as token ids
  std::string prompt;
  std::optional<std::vector<int64_t>> prompt_ids;
  std::vector<ChatMessage> messages;  // chat
  std::optional<int64_t> max_tokens;  // absent: 16 (completions) or the rest of the context (chat)
  double temperature = 1.0;           // OpenAI's default; 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 (or vLLM's -1): off
  std::optional<int64_t> seed;
  std::vector<std::string> stop;  // generation ends before the first of these (not returned)
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

CompletionRequest parse_completion_request(std::string_view body, bool chat);

// The response bodies, as OpenAI's (and vLLM's) API writes them. finish_reason: "stop",
// "length", or "abort" (vLLM's word for a request the server ended: shutdown, timeout).
struct CompletionText {
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  std::string model;
  int64_t created = 0;  // Unix seconds
  std::string text;
  std::optional<std::string> finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
std::string completion_json(const CompletionText& c, bool chat);
// One Server-Sent Events chunk's JSON (without "data: "): the text delta, and the finish reason on
// the last; first (chat): the delta carries the assistant role.
std::string completion_chunk_json(const CompletionText& c, bool chat, bool first);
// The chunk with empty choices and the usage, sent last when stream_options.include_usage.
std::string usage_chunk_json(const CompletionText& c, bool chat);

}  // namespace kvlab::serve
