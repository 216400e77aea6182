#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "io/json_document.h"
#include "spec/spec_error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

// A merge written as "left right" (tokenizers < 0.20) or ["left", "right"].
std::pair<std::string, std::string> merge_parts(const json& merge, const std::string& where) {
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && space > 0 && space + 1 < text.size() &&
        text.find(' ', space + 1) == std::string::npos) {
      return {text.substr(0, space), text.substr(space + 1)};
    }
  }
  throw SpecError(where,
                  R"(expected "left right" or ["left", "right"], got )" + json_excerpt(merge));
}

bool empty_or_null(const json& config, const char* key) {
  return !config.contains(key) || config.at(key).is_null() ||
         (config.at(key).is_string() && config.at(key).get<std::string>().empty());
}

}  // namespace

BpeModel::BpeModel(const json& config, const std::unordered_map<std::string, int32_t>& added,
                   const std::string& where) {
  check_members(config,
                {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                 "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"},
                where);
  if (config.contains("dropout") && !config.at("dropout").is_null()) {
    throw SpecError(where + ".dropout",
                    "BPE dropout (random merges) is a training option; "
                    "kvlab encodes deterministically and needs null");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!empty_or_null(config, key)) {
      throw SpecError(where + "." + key, "only null or \"\" is supported");
    }
  }
  byte_fallback_ = bool_member_or(config, "byte_fallback", false, where);
  fuse_unk_ = bool_member_or(config, "fuse_unk", false, where);
  ignore_merges_ = bool_member_or(config, "ignore_merges", false, where);

  const json& vocab = member(config, "vocab", where);
  if (!vocab.is_object()) throw SpecError(where + ".vocab", "expected an object token -> id");
  const auto add = [&](const std::string& token, int64_t id, const std::string& field) {
    if (id < 0 || id >= (int64_t{1} << 30)) {
      throw SpecError(field, "id " + std::to_string(id) + " is out of range");
    }
    if (tokens_.size() <= static_cast<size_t>(id)) {
      tokens_.resize(id + 1);
      has_token_.resize(id + 1, false);
    }
    ids_[token] = static_cast<int32_t>(id);
    tokens_[id] = token;
    has_token_[id] = true;
  };
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) {
      throw SpecError(where + ".vocab", "'" + text_excerpt(token) + "' has id " + json_excerpt(id) +
                                            ", expected an integer");
    }
    add(token, id.get<int64_t>(), where + ".vocab");
  }
  for (const auto& [token, id] : added) add(token, id, "added_tokens");

  const json& merges = member(config, "merges", where);
  if (!merges.is_array()) throw SpecError(where + ".merges", "expected an array");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string field = where + ".merges[" + std::to_string(rank) + "]";
    const auto [left, right] = merge_parts(merges[rank], field);
    const int32_t l = id(left), r = id(right), m = id(left + right);
    if (l < 0 || r < 0 || m < 0) {
      const std::string& missing = l < 0 ? left : r < 0 ? right : left + right;
      throw SpecError(field, "'" + text_excerpt(missing) + "' is not in the vocabulary");
    }
    // A repeated pair keeps its first (lowest) rank, as the reference implementations do.
    merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), m});
  }

  if (!empty_or_null(config, "unk_token")) {
    const std::string unk = string_member(config, "unk_token", where);
    unk_id_ = id(unk);
    if (unk_id_ < 0)
      throw SpecError(where + ".unk_token", "'" + unk + "' is not in the vocabulary");
  }
  if (byte_fallback_) {
    byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_ids_[b] = id(name);
    }
  }
}

const std::string* BpeModel::token(int32_t id) const {
  if (id < 0 || id >= size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

int32_t BpeModel::id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    const int32_t whole = id(piece);
    if (whole >= 0) {
      ids.push_back(whole);
      return;
    }
  }
  merge_symbols(piece, ids);
}

void BpeModel::merge_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  // One symbol per character; -1 for a character the vocabulary lacks (it never merges).
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t begin, bytes;  // the characters it covers in `piece`
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < piece.size();) {
    size_t n = 0;
    code_point_at(piece, i, &n);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id(piece.substr(i, n)), index - 1, index + 1, static_cast<uint32_t>(i),
                       static_cast<uint32_t>(n)});
    i += n;
  }
  if (!symbols.empty()) symbols.back().next = -1;

  // (rank, position of the left symbol): the lowest rank first, the leftmost among equals.
  struct Candidate {
    int32_t rank, left, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.merged});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale entries: the left symbol was merged away or changed, or its neighbour did.
    if (left.bytes == 0 || left.next < 0) continue;
    const auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.merged != c.merged || it->second.rank != c.rank) continue;
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.bytes += right.bytes;
    left.next = right.next;
    right.bytes = 0;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }

  bool previous_unk = false;
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      ids.push_back(s.id);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (uint32_t k = 0; k < s.bytes; ++k) {
        all = all && byte_ids_[static_cast<uint8_t>(piece[s.begin + k])] >= 0;
      }
      if (all) {
        for (uint32_t k = 0; k < s.bytes; ++k) {
          ids.push_back(byte_ids_[static_cast<uint8_t>(piece[s.begin + k])]);
        }
        previous_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) {
      throw SpecError("text", "'" + std::string(piece.substr(s.begin, s.bytes)) +
                                  "' is not in the vocabulary, and the tokenizer has neither "
                                  "byte_fallback nor an unk_token");
    }
    if (!(fuse_unk_ && previous_unk)) ids.push_back(unk_id_);
    previous_unk = true;
  }
}

}  // namespace kvlab::tok
