#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace kvlab::tok {

// tokenizer.json's "decoder": token strings -> text, as a chain of steps over the list of
// strings (each step may merge or rewrite them). Types read: ByteLevel, ByteFallback, Fuse,
// Replace, Strip, Sequence.
class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// `added_tokens`: the contents of the added tokens, which ByteLevel passes through as text
// instead of mapping their characters back to bytes. null -> nullptr.
std::unique_ptr<TokenDecoder> make_token_decoder(const nlohmann::json& config,
                                                 const std::string& where,
                                                 const std::set<std::string>& added_tokens);

}  // namespace kvlab::tok
