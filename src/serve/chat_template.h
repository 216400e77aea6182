#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "serve/openai_api.h"

namespace kvlab::serve {

// The chat formats kvlab renders natively (no Jinja interpreter): the well-known families of
// Hugging Face chat templates, and a plain one for models trained without a chat format.
enum class ChatFormat { kChatMl, kLlama3, kLlama2, kDeepSeek, kPlain };

const char* chat_format_name(ChatFormat format);
// "chatml" (Qwen), "llama3", "llama2", "deepseek", "plain"; throws SpecError(field) otherwise.
ChatFormat parse_chat_format(std::string_view name, const char* field);
// The family of a tokenizer_config.json's chat_template, by the markers each family's templates
// write; throws SpecError("chat_template") naming the choices where it is none of them, or a
// variant whose extra text kvlab does not render (Llama 3.1's dated system header).
ChatFormat detect_chat_format(std::string_view jinja_template);

struct ChatTemplate {
  ChatFormat format = ChatFormat::kPlain;
  std::string bos_token, eos_token;  // the tokenizer's, as the template writes them
};

// The prompt text of a conversation, with the assistant's turn opened (add_generation_prompt),
// as the family's template renders it for messages of system, user and assistant roles. The text
// carries the template's special tokens (BOS included): encode it without adding special tokens.
std::string render_chat(const ChatTemplate& chat, const std::vector<ChatMessage>& messages);

// A model folder's template: tokenizer_config.json's chat_template and special tokens, detected;
// name: a --chat-template choice that overrides the detection ("" none). A folder without a
// tokenizer_config.json (a kvlab byte model) gets the plain format.
ChatTemplate load_chat_template(const std::string& dir, const std::string& name);

}  // namespace kvlab::serve
