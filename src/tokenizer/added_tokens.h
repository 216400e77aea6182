#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab::tok {

// tokenizer.json's "added_tokens": strings matched in the raw text before anything else
// (special tokens such as "<|endoftext|>" among them), each becoming its id.
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;  // whitespace before it is dropped
  bool rstrip = false;  // whitespace after it is dropped
};

// Splits text at added tokens: at each position the longest token that starts there wins, and
// the scan moves left to right (as transformers.js's DictionarySplitter and the trie of the
// Rust library do).
class AddedTokenSplitter {
 public:
  explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens);

  struct Section {
    std::string_view text;
    const AddedToken* token = nullptr;  // set when the section is an added token
  };
  std::vector<Section> split(std::string_view text) const;

 private:
  struct Node {
    std::map<uint8_t, int32_t> children;
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  std::vector<Node> trie_{Node{}};
  std::vector<AddedToken> tokens_;
};

}  // namespace kvlab::tok
