#include "serve/openai_api.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace kvlab::serve {
namespace {

using nlohmann::json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError(400, param + ": " + message, param);
}

const char* json_type(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

double number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) throw bad(name, std::string("must be a number, got ") + json_type(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    throw bad(name,
              "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  }
  return x;
}

int64_t integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    throw bad(name, std::string("must be an integer, got ") + json_type(v) + " " + v.dump());
  }
  // a JSON integer above INT64_MAX parses as unsigned
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw bad(name, "must be at most " + std::to_string(hi) + ", got " + v.dump());
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    throw bad(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                        std::to_string(x));
  }
  return x;
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) throw bad(name, std::string("must be a boolean, got ") + json_type(v));
  return v.get<bool>();
}

std::string text_of(const json& v, const std::string& name) {
  if (!v.is_string()) throw bad(name, std::string("must be a string, got ") + json_type(v));
  return v.get<std::string>();
}

// Fields of OpenAI's API kvlab accepts only with their no-op value.
void require_noop(const std::string& key, const json& v) {
  const bool noop = v.is_null() || (key == "n" && v == 1) || (key == "best_of" && v == 1) ||
                    ((key == "echo" || key == "logprobs") && v == false) ||
                    ((key == "presence_penalty" || key == "frequency_penalty") && v.is_number() &&
                     v.get<double>() == 0) ||
                    (key == "logit_bias" && v.is_object() && v.empty()) ||
                    (key == "suffix" && v.is_string() && v.get<std::string>().empty());
  if (noop) return;
  if (key == "n" || key == "best_of") {
    throw bad(key, "only 1 is supported (one completion a request), got " + v.dump());
  }
  throw bad(key, "is not supported by kvlab (only its default is accepted), got " + v.dump());
}

std::vector<std::string> stop_strings(const json& v) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > 4) throw bad("stop", "at most 4 stop strings, got " + std::to_string(v.size()));
    for (const json& s : v) out.push_back(text_of(s, "stop"));
  } else {
    throw bad("stop", std::string("must be a string or an array of strings, got ") + json_type(v));
  }
  for (const std::string& s : out) {
    if (s.empty()) throw bad("stop", "a stop string must not be empty");
    if (s.size() > 1024) throw bad("stop", "a stop string must be at most 1024 bytes");
  }
  return out;
}

std::string content_of(const json& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) {
    throw bad(name, std::string("must be a string or an array of text parts, got ") + json_type(v));
  }
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string part = name + "[" + std::to_string(i) + "]";
    const json& p = v[i];
    if (!p.is_object() || !p.contains("type") || p["type"] != "text" || !p.contains("text")) {
      throw bad(part, "only {\"type\": \"text\", \"text\": ...} parts are supported");
    }
    text += text_of(p["text"], part + ".text");
  }
  return text;
}

std::vector<ChatMessage> chat_messages(const json& v) {
  if (!v.is_array() || v.empty()) throw bad("messages", "must be a non-empty array of messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) throw bad(name, std::string("must be an object, got ") + json_type(m));
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name") {
        throw bad(name + "." + key, "unknown message field");
      }
    }
    if (!m.contains("role")) throw bad(name + ".role", "is required");
    ChatMessage msg;
    msg.role = text_of(m["role"], name + ".role");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
      throw bad(name + ".role", "must be system, user or assistant, got \"" + msg.role + "\"");
    }
    if (!m.contains("content")) throw bad(name + ".content", "is required");
    msg.content = content_of(m["content"], name + ".content");
    out.push_back(std::move(msg));
  }
  return out;
}

void parse_prompt(const json& v, CompletionRequest& r) {
  if (v.is_string()) {
    r.prompt = v.get<std::string>();
    if (r.prompt.empty()) throw bad("prompt", "must not be empty");
    return;
  }
  if (!v.is_array() || v.empty()) {
    throw bad("prompt", std::string("must be a string or an array of token ids, got ") +
                            (v.is_array() ? "an empty array" : json_type(v)));
  }
  if (v[0].is_string()) {
    if (v.size() > 1)
      throw bad("prompt", "one prompt a request (n = 1), got " + std::to_string(v.size()));
    parse_prompt(v[0], r);
    return;
  }
  if (v[0].is_array())
    throw bad("prompt", "one prompt a request: batched token arrays are not supported");
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    ids.push_back(
        integer(v[i], "prompt[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max()));
  }
  r.prompt_ids = std::move(ids);
}

}  // namespace

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)) {}

std::string ApiError::type() const {
  switch (status_) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ApiError::json() const {
  nlohmann::json e = {{"message", what()},
                      {"type", type()},
                      {"param", param_.empty() ? nlohmann::json() : nlohmann::json(param_)},
                      {"code", code_.empty() ? nlohmann::json() : nlohmann::json(code_)}};
  // a message may quote the request's bytes, which need not be UTF-8
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace);
}

CompletionRequest parse_completion_request(std::string_view body, bool chat) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw ApiError(400, std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) {
    throw ApiError(400, std::string("the body must be a JSON object, got ") + json_type(j));
  }
  static const std::set<std::string> noop_fields = {
      "n",          "best_of", "echo",         "logprobs", "presence_penalty", "frequency_penalty",
      "logit_bias", "suffix",  "top_logprobs", "tools",    "tool_choice",      "response_format",
      "functions"};
  CompletionRequest r;
  r.chat = chat;
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      r.model = text_of(v, key);
    } else if (key == "prompt" && !chat) {
      parse_prompt(v, r);
    } else if (key == "messages" && chat) {
      r.messages = chat_messages(v);
    } else if (key == "max_tokens" || (chat && key == "max_completion_tokens")) {
      if (!v.is_null()) r.max_tokens = integer(v, key, 1, int64_t{1} << 31);
    } else if (key == "temperature") {
      if (!v.is_null()) r.temperature = number(v, key, 0, 2);
    } else if (key == "top_p") {
      if (!v.is_null()) r.top_p = number(v, key, 0, 1);
      if (r.top_p == 0) throw bad(key, "must be in (0, 1], got 0");
    } else if (key == "top_k") {
      if (!v.is_null()) r.top_k = integer(v, key, -1, int64_t{1} << 31);
      if (r.top_k < 0) r.top_k = 0;
    } else if (key == "seed") {
      if (!v.is_null()) {
        r.seed = integer(v, key, std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max());
      }
    } else if (key == "stop") {
      r.stop = stop_strings(v);
    } else if (key == "stop_token_ids") {
      if (v.is_null()) continue;
      if (!v.is_array())
        throw bad(key, std::string("must be an array of token ids, got ") + json_type(v));
      for (size_t i = 0; i < v.size(); ++i) {
        r.stop_token_ids.push_back(integer(v[i], key + "[" + std::to_string(i) + "]", 0,
                                           std::numeric_limits<int32_t>::max()));
      }
    } else if (key == "ignore_eos") {
      r.ignore_eos = boolean(v, key);
    } else if (key == "stream") {
      if (!v.is_null()) r.stream = boolean(v, key);
    } else if (key == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw bad(key, std::string("must be an object, got ") + json_type(v));
      for (const auto& [option, value] : v.items()) {
        if (option != "include_usage") throw bad(key + "." + option, "unknown stream option");
        r.include_usage = boolean(value, key + "." + option);
      }
    } else if (key == "user") {
      text_of(v, key);  // accepted, unused
    } else if (noop_fields.count(key) != 0) {
      require_noop(key, v);
    } else {
      throw bad(key, "unknown field");
    }
  }
  if (chat && r.messages.empty()) throw bad("messages", "is required");
  if (!chat && r.prompt.empty() && !r.prompt_ids) throw bad("prompt", "is required");
  if (j.contains("stream_options") && !j["stream_options"].is_null() && !r.stream) {
    throw bad("stream_options", "is allowed only with stream: true");
  }
  return r;
}

std::string completion_json(const CompletionText& c, bool chat) {
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json()}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    choice["text"] = c.text;
  }
  const json body = {{"id", c.id},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", c.created},
                     {"model", c.model},
                     {"choices", json::array({choice})},
                     {"usage",
                      {{"prompt_tokens", c.prompt_tokens},
                       {"completion_tokens", c.completion_tokens},
                       {"total_tokens", c.prompt_tokens + c.completion_tokens}}}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string completion_chunk_json(const CompletionText& c, bool chat, bool first) {
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", c.finish_reason ? json(*c.finish_reason) : json()}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!c.text.empty() || first) delta["content"] = c.text;
    choice["delta"] = delta;
  } else {
    choice["text"] = c.text;
  }
  const json body = {{"id", c.id},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", c.created},
                     {"model", c.model},
                     {"choices", json::array({choice})}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string usage_chunk_json(const CompletionText& c, bool chat) {
  const json body = {{"id", c.id},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", c.created},
                     {"model", c.model},
                     {"choices", json::array()},
                     {"usage",
                      {{"prompt_tokens", c.prompt_tokens},
                       {"completion_tokens", c.completion_tokens},
                       {"total_tokens", c.prompt_tokens + c.completion_tokens}}}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvlab::serve
