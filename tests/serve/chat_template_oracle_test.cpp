// kvlab's native chat formats against the templates real models ship, rendered by a Jinja
// interpreter no one here wrote (@huggingface/jinja, npm; skipped when the oracles are missing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "harness/process.h"
#include "serve/chat_template.h"

namespace kvlab::serve {
namespace {

using nlohmann::json;

TEST(ChatTemplateOracleTest, NativeFormatsRenderAsTheModelsTemplates) {
  const char* oracles = std::getenv("KVLAB_ORACLES");
  if (oracles == nullptr) GTEST_SKIP() << "KVLAB_ORACLES is not set (run through ctest)";
  if (std::filesystem::exists(std::string(oracles) + "/UNAVAILABLE")) {
    GTEST_SKIP() << "npm oracles unavailable: "
                 << test::slurp(std::string(oracles) + "/UNAVAILABLE");
  }
  // conversations as chat clients send them: a system prompt or none, earlier turns, whitespace
  // the Llama 3 template trims, a newline inside a message
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "Hello!"}},
      {{"system", "You are terse."}, {"user", "What is 2+2?"}},
      {{"system", "Be brief."},
       {"user", "  Hi  "},
       {"assistant", "Hello."},
       {"user", "Two lines:\nfirst\nsecond"}},
      {{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}, {"user", "e"}},
  };
  const std::string dir = "/tmp/kvlab_chat_oracle_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  json in = {{"packages", {"tokenizer-qwen3", "tokenizer-llama3", "tokenizer-deepseek_v3"}},
             {"conversations", json::array()}};
  for (const auto& c : conversations) {
    json messages = json::array();
    for (const ChatMessage& m : c) messages.push_back({{"role", m.role}, {"content", m.content}});
    in["conversations"].push_back(messages);
  }
  test::write_file(dir + "/in.json", in.dump());
  test::Invocation node;
  node.args = {std::string(KVLAB_ORACLE_SCRIPTS) + "/chat_template_oracle.mjs", oracles,
               dir + "/in.json", dir + "/out.json"};
  const test::ProcessResult r = test::run_exec("/usr/bin/node", node);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(test::slurp(dir + "/out.json"));
  const std::map<std::string, ChatFormat> expected_format = {
      {"tokenizer-qwen3", ChatFormat::kChatMl},
      {"tokenizer-llama3", ChatFormat::kLlama3},
      {"tokenizer-deepseek_v3", ChatFormat::kDeepSeek}};
  for (const auto& [package, result] : out.items()) {
    SCOPED_TRACE(package);
    ChatTemplate chat;
    chat.format = detect_chat_format(result["chat_template"].get<std::string>());
    EXPECT_EQ(chat.format, expected_format.at(package));
    chat.bos_token = result["bos_token"];
    chat.eos_token = result["eos_token"];
    for (size_t i = 0; i < conversations.size(); ++i) {
      EXPECT_EQ(render_chat(chat, conversations[i]), result["rendered"][i].get<std::string>())
          << "conversation " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvlab::serve
