#pragma once

// Small tokenizer.json documents whose encodings the tests work out by hand.
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvlab::tok {

// SentencePiece-style BPE (Llama 2): "▁" for spaces, byte fallback, <s> from the template.
inline nlohmann::json sentencepiece_tokenizer(bool byte_fallback) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      vocab[name] = 3 + b;
    }
  }
  vocab["\xE2\x96\x81"] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab["hi"] = 262;
  vocab["\xE2\x96\x81hi"] = 263;
  return {
      {"added_tokens",
       nlohmann::json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                              {{"id", 1}, {"content", "<s>"}, {"special", true}},
                              {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", nlohmann::json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                               {{"type", "Replace"},
                                                {"pattern", {{"String", " "}}},
                                                {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", nlohmann::json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         nlohmann::json::array(
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", byte_fallback},
        {"vocab", vocab},
        {"merges", nlohmann::json::array({"h i", "\xE2\x96\x81 hi"})}}}};
}

}  // namespace kvlab::tok
