#include "tokenizer/added_tokens.h"

namespace kvlab::tok {

AddedTokenSplitter::AddedTokenSplitter(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t t = 0; t < tokens_.size(); ++t) {
    int32_t node = 0;
    for (const char c : tokens_[t].content) {
      const auto byte = static_cast<uint8_t>(c);
      const auto it = trie_[node].children.find(byte);
      if (it != trie_[node].children.end()) {
        node = it->second;
        continue;
      }
      trie_.push_back(Node{});
      const auto child = static_cast<int32_t>(trie_.size() - 1);
      trie_[node].children.emplace(byte, child);
      node = child;
    }
    if (node != 0) trie_[node].token = static_cast<int32_t>(t);
  }
}

std::vector<AddedTokenSplitter::Section> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Section> sections;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t node = 0, match = -1;
    size_t match_end = i;
    for (size_t j = i; j < text.size(); ++j) {
      const auto it = trie_[node].children.find(static_cast<uint8_t>(text[j]));
      if (it == trie_[node].children.end()) break;
      node = it->second;
      if (trie_[node].token >= 0) {
        match = trie_[node].token;
        match_end = j + 1;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({text.substr(start, i - start), nullptr});
    sections.push_back({text.substr(i, match_end - i), &tokens_[match]});
    i = start = match_end;
  }
  if (start < text.size()) sections.push_back({text.substr(start), nullptr});
  return sections;
}

}  // namespace kvlab::tok
