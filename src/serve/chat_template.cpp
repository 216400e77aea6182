#include "serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

// Jinja's `trim` and Python's str.strip(): leading and trailing whitespace
std::string strip(std::string_view s) {
  const char* space = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(space) - first + 1));
}

std::string chatml(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  return out + "<|im_start|>assistant\n";
}

std::string llama3(const ChatTemplate& chat, const std::vector<ChatMessage>& messages) {
  std::string out = chat.bos_token;
  for (const ChatMessage& m : messages) {
    out +=
        "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + strip(m.content) + "<|eot_id|>";
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

// Meta's Llama 2 chat format: a system message goes inside the first user turn.
std::string llama2(const ChatTemplate& chat, const std::vector<ChatMessage>& messages) {
  std::string out, system;
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += chat.bos_token;
      out += "[INST] ";
      if (i == first) out += system;
      out += strip(m.content);
      out += " [/INST]";
    } else if (m.role == "assistant") {
      out += ' ';
      out += strip(m.content);
      out += ' ';
      out += chat.eos_token;
    } else {
      throw SpecError("messages", "the llama2 chat format has a system message first only");
    }
  }
  return out;
}

// DeepSeek V2/V3: the system messages, joined, after BOS; then the turns.
std::string deepseek(const ChatTemplate& chat, const std::vector<ChatMessage>& messages) {
  std::string system;
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    system += (first_system ? "" : "\n\n") + m.content;
    first_system = false;
  }
  std::string out = chat.bos_token + system;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") out += "<｜User｜>" + m.content;
    if (m.role == "assistant") out += "<｜Assistant｜>" + m.content + chat.eos_token;
  }
  return out + "<｜Assistant｜>";
}

std::string plain(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant: ";
}

// tokenizer_config.json writes a special token as a string or as {"content": ...}
std::string token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return {};
}

}  // namespace

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kLlama2:
      return "llama2";
    case ChatFormat::kDeepSeek:
      return "deepseek";
    case ChatFormat::kPlain:
      return "plain";
  }
  return "?";
}

ChatFormat parse_chat_format(std::string_view name, const char* field) {
  for (const ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kLlama2,
                             ChatFormat::kDeepSeek, ChatFormat::kPlain}) {
    if (name == chat_format_name(f)) return f;
  }
  if (name == "qwen") return ChatFormat::kChatMl;
  throw SpecError(field, "unknown chat template \"" + std::string(name) +
                             "\" (chatml or qwen, llama3, llama2, deepseek, plain)");
}

ChatFormat detect_chat_format(std::string_view t) {
  auto has = [&](std::string_view marker) { return t.find(marker) != std::string_view::npos; };
  if (has("<|start_header_id|>")) {
    if (has("Cutting Knowledge Date") || has("tools_in_user_message")) {
      throw SpecError("chat_template",
                      "a Llama 3.1+ template (its dated system header and tool prompts) is not "
                      "rendered natively; --chat-template llama3 renders Llama 3's turns without "
                      "them");
    }
    return ChatFormat::kLlama3;
  }
  if (has("<|im_start|>")) return ChatFormat::kChatMl;
  if (has("<｜User｜>")) return ChatFormat::kDeepSeek;
  if (has("[INST]")) return ChatFormat::kLlama2;
  throw SpecError("chat_template",
                  "the tokenizer's chat template is none of the families kvlab renders (chatml/"
                  "qwen, llama3, llama2, deepseek): choose one with --chat-template");
}

std::string render_chat(const ChatTemplate& chat, const std::vector<ChatMessage>& messages) {
  switch (chat.format) {
    case ChatFormat::kChatMl:
      return chatml(messages);
    case ChatFormat::kLlama3:
      return llama3(chat, messages);
    case ChatFormat::kLlama2:
      return llama2(chat, messages);
    case ChatFormat::kDeepSeek:
      return deepseek(chat, messages);
    case ChatFormat::kPlain:
      return plain(messages);
  }
  throw SpecError("chat_template", "unknown chat format");
}

ChatTemplate load_chat_template(const std::string& dir, const std::string& name) {
  ChatTemplate chat;
  const std::string path = dir + "/tokenizer_config.json";
  if (!std::filesystem::exists(path)) {
    chat.format = name.empty() ? ChatFormat::kPlain : parse_chat_format(name, "chat-template");
    return chat;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw SpecError("tokenizer_config", path + " is not valid JSON: " + e.what());
  }
  if (!config.is_object()) throw SpecError("tokenizer_config", path + " is not a JSON object");
  if (config.contains("bos_token")) chat.bos_token = token_text(config["bos_token"]);
  if (config.contains("eos_token")) chat.eos_token = token_text(config["eos_token"]);
  if (!name.empty()) {
    chat.format = parse_chat_format(name, "chat-template");
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    chat.format = detect_chat_format(config["chat_template"].get<std::string>());
  } else if (config.contains("chat_template")) {
    throw SpecError("chat_template", path +
                                         ": a list of named templates is not supported; choose "
                                         "one with --chat-template");
  } else {
    throw SpecError("chat_template",
                    path +
                        " has no chat_template: choose one with --chat-template (chatml, "
                        "llama3, llama2, deepseek, plain)");
  }
  return chat;
}

}  // namespace kvlab::serve
