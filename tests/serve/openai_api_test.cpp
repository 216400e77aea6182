// The OpenAI API's request checks and response shapes, without a server.
#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvlab::serve {
namespace {

using nlohmann::json;

TEST(OpenAiApiTest, ParsesACompletionWithEveryFieldKvlabTakes) {
  const CompletionRequest r = parse_completion_request(
      R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": -1, "seed": -3, "stop": "\n", "stop_token_ids": [2], "ignore_eos": true,
          "stream": true, "stream_options": {"include_usage": true}, "n": 1, "echo": false,
          "logprobs": null, "presence_penalty": 0, "frequency_penalty": 0.0, "user": "u",
          "logit_bias": {}, "best_of": 1, "suffix": null})",
      false);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.top_p, 0.9);
  EXPECT_EQ(r.top_k, 0);  // vLLM's -1: off
  EXPECT_EQ(r.seed, -3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.stop_token_ids, std::vector<int64_t>{2});
  EXPECT_TRUE(r.ignore_eos && r.stream && r.include_usage);
  // defaults: OpenAI's
  const CompletionRequest d = parse_completion_request(R"({"prompt": [5, 6]})", false);
  EXPECT_EQ(d.prompt_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_DOUBLE_EQ(d.temperature, 1.0);
  EXPECT_FALSE(d.stream);
  // one prompt in an array is one prompt
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["x"]})", false).prompt, "x");
}

TEST(OpenAiApiTest, ChatMessagesTakeTextPartsAndRoles) {
  const CompletionRequest r = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "s"},
                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 3})",
      true);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 3);
  // a prompt is not a chat field, nor messages a completion's
  EXPECT_THROW(parse_completion_request(R"({"messages": [], "prompt": "x"})", true), ApiError);
  EXPECT_THROW(parse_completion_request(R"({"prompt": "x", "messages": []})", false), ApiError);
}

TEST(OpenAiApiTest, EveryBadFieldIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "x", "n": 3})", "n"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "presence_penalty": 0.1})", "presence_penalty"},
      {R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias"},
      {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "temperature": null, "top_p": -1})", "top_p"},
      {R"({"prompt": "x", "top_k": "5"})", "top_k"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", "seed"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids[0]"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"x": 1}})", "stream_options.x"},
      {R"({"prompt": "x", "model": 5})", "model"},
      {R"({"prompt": "x", "user": 5})", "user"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [[1, 2]]})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt[1]"},
      {R"({"prompt": [1, 2.5]})", "prompt[1]"},
      {R"({"prompt": "x", "tools": [{}]})", "tools"},
      {R"({"prompt": "x", "mystery": 1})", "mystery"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body);
    try {
      parse_completion_request(body, false);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
      EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
    }
  }
  for (const std::string body : {"", "nul", "{", "\"x\"", "{\"prompt\": \"\xc3\x28\"}"}) {
    try {
      parse_completion_request(body, false);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "");
    }
  }
}

TEST(OpenAiApiTest, ErrorsAndResponsesHaveOpenAisShape) {
  const json e = json::parse(ApiError(404, "gone", "model", "model_not_found").json());
  EXPECT_EQ(e, json::parse(R"({"error": {"message": "gone", "type": "not_found_error",
                                          "param": "model", "code": "model_not_found"}})"));
  EXPECT_TRUE(json::parse(ApiError(413, "big").json())["error"]["param"].is_null());
  EXPECT_EQ(ApiError(401, "").type(), "authentication_error");
  EXPECT_EQ(ApiError(400, "").type(), "invalid_request_error");

  CompletionText c;
  c.id = "cmpl-1";
  c.model = "m";
  c.created = 5;
  c.text = "hi";
  c.finish_reason = "length";
  c.prompt_tokens = 3;
  c.completion_tokens = 2;
  const json text = json::parse(completion_json(c, false));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "hi");
  EXPECT_EQ(text["usage"]["total_tokens"], 5);
  const json chat = json::parse(completion_json(c, true));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"],
            json::parse(R"({"role": "assistant", "content": "hi"})"));
  c.finish_reason.reset();
  const json first = json::parse(completion_chunk_json(c, true, true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json usage = json::parse(usage_chunk_json(c, false));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  // bytes that are not UTF-8 never break the JSON
  c.text = "\xff";
  EXPECT_NO_THROW(json::parse(completion_json(c, false)));
}

}  // namespace
}  // namespace kvlab::serve
