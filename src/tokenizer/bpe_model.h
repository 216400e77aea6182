#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvlab::tok {

// tokenizer.json's "model" of type BPE: a vocabulary, ranked merges, and what to do with a
// character the vocabulary lacks (its UTF-8 bytes as "<0xHH>" tokens with byte_fallback,
// else unk_token). Merging follows the reference implementations: repeatedly merge the
// adjacent pair of lowest rank, leftmost first among equal ranks (a heap over a linked list,
// O(n log n) in the piece's length, so a whole book as one SentencePiece piece is fine).
class BpeModel {
 public:
  // `added`: added tokens (content -> id), which join the vocabulary's lookups.
  BpeModel(const nlohmann::json& config, const std::unordered_map<std::string, int32_t>& added,
           const std::string& where);

  // Appends the ids of one pre-tokenized piece (valid UTF-8, non-empty).
  void encode(std::string_view piece, std::vector<int32_t>& ids) const;

  // The token string of an id, or nullptr when the vocabulary has none.
  const std::string* token(int32_t id) const;
  // -1 when absent.
  int32_t id(std::string_view token) const;
  // One more than the largest id.
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void merge_symbols(std::string_view piece, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> ids_;  // token -> id (added tokens included)
  std::vector<std::string> tokens_;               // id -> token ("" for an id no token has)
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // "<0xHH>" -> id, or -1; filled with byte_fallback
};

}  // namespace kvlab::tok
