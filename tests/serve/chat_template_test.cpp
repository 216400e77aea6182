// Chat formats rendered natively, against the text each family's template writes (see also the
// Jinja oracle in server_test.cpp, which renders the real templates).
#include "serve/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "spec/spec_error.h"

namespace kvlab::serve {
namespace {

const std::vector<ChatMessage> kConversation = {{"system", "Be brief."},
                                                {"user", " Hi there "},
                                                {"assistant", "Hello."},
                                                {"user", "Count to 3."}};

TEST(ChatTemplateTest, EachFamilyWritesItsTurns) {
  EXPECT_EQ(render_chat({ChatFormat::kChatMl, "", "<|im_end|>"}, kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there <|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nCount to 3.<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat({ChatFormat::kLlama3, "<|begin_of_text|>", ""}, kConversation),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nCount to 3.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat({ChatFormat::kLlama2, "<s>", "</s>"}, kConversation),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello. </s>"
            "<s>[INST] Count to 3. [/INST]");
  EXPECT_EQ(render_chat({ChatFormat::kDeepSeek, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
                        kConversation),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜> Hi there <｜Assistant｜>Hello."
            "<｜end▁of▁sentence｜><｜User｜>Count to 3.<｜Assistant｜>");
  EXPECT_EQ(render_chat({ChatFormat::kPlain, "", ""}, kConversation),
            "system: Be brief.\nuser:  Hi there \nassistant: Hello.\nuser: Count to 3.\n"
            "assistant: ");
  // Llama 2 keeps a system message first only
  EXPECT_THROW(render_chat({ChatFormat::kLlama2, "<s>", "</s>"}, {{"user", "a"}, {"system", "b"}}),
               SpecError);
}

TEST(ChatTemplateTest, DetectsTheFamilyOrNamesTheChoices) {
  EXPECT_EQ(detect_chat_format("{{'<|im_start|>' + message['role']}}"), ChatFormat::kChatMl);
  EXPECT_EQ(detect_chat_format("{{'<|start_header_id|>' + role}}"), ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format("{{ bos_token + '[INST] ' + content }}"), ChatFormat::kLlama2);
  EXPECT_EQ(detect_chat_format("{{'<｜User｜>' + content}}"), ChatFormat::kDeepSeek);
  try {
    detect_chat_format("{{ 'Human: ' + content }}");
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "chat_template");
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos);
  }
  EXPECT_THROW(detect_chat_format("<|start_header_id|> Cutting Knowledge Date: {{ date }}"),
               SpecError);
  EXPECT_EQ(parse_chat_format("qwen", "chat-template"), ChatFormat::kChatMl);
  EXPECT_THROW(parse_chat_format("vicuna", "chat-template"), SpecError);
}

TEST(ChatTemplateTest, ReadsAFoldersTokenizerConfig) {
  const std::string dir = "/tmp/kvlab_chat_template_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  EXPECT_EQ(load_chat_template(dir, "").format, ChatFormat::kPlain);  // no config: plain
  EXPECT_EQ(load_chat_template(dir, "llama3").format, ChatFormat::kLlama3);
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
             "chat_template": "{{ bos_token + '[INST] ' }}"})";
  const ChatTemplate t = load_chat_template(dir, "");
  EXPECT_EQ(t.format, ChatFormat::kLlama2);
  EXPECT_EQ(t.bos_token, "<s>");
  EXPECT_EQ(t.eos_token, "</s>");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "</s>"})";
  EXPECT_THROW(load_chat_template(dir, ""), SpecError);  // none to detect: choose one
  EXPECT_EQ(load_chat_template(dir, "chatml").format, ChatFormat::kChatMl);
  std::ofstream(dir + "/tokenizer_config.json") << "{not json";
  EXPECT_THROW(load_chat_template(dir, ""), SpecError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvlab::serve
