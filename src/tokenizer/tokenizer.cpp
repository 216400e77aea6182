#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <unordered_map>

#include "io/atomic_file.h"
#include "io/json_document.h"
#include "spec/spec_error.h"
#include "tokenizer/component_json.h"
#include "tokenizer/utf8.h"

namespace kvlab::tok {
namespace {

using nlohmann::json;

// Llama 3's tokenizer.json is 9 MB; a file past this is not a tokenizer.
constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;
// Pieces up to this many bytes are remembered within one encode (words repeat).
constexpr size_t kMaxCachedPieceBytes = 256;

std::vector<AddedToken> read_added_tokens(const json& list) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) throw SpecError("added_tokens", "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& entry = list[i];
    if (!entry.is_object()) throw SpecError(where, "expected an object");
    check_members(entry,
                  {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"},
                  where);
    if (bool_member_or(entry, "single_word", false, where)) {
      throw SpecError(where + ".single_word", "true is not supported");
    }
    AddedToken token;
    const json& id = member(entry, "id", where);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= (int64_t{1} << 30)) {
      throw SpecError(where + ".id", "expected a non-negative integer, got " + json_excerpt(id));
    }
    token.id = static_cast<int32_t>(id.get<int64_t>());
    token.content = string_member(entry, "content", where);
    if (token.content.empty()) throw SpecError(where + ".content", "must not be empty");
    check_utf8(token.content, where + ".content");
    token.special = bool_member_or(entry, "special", false, where);
    token.lstrip = bool_member_or(entry, "lstrip", false, where);
    token.rstrip = bool_member_or(entry, "rstrip", false, where);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// tokenizer_config.json names tokens either as a string or as {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key) || config.at(key).is_null()) return std::nullopt;
  const json& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  throw SpecError(std::string("tokenizer_config.") + key,
                  "expected a string or an object with \"content\", got " + json_excerpt(value));
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path file =
      fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  std::string text;
  try {
    text = read_file(file.string(), kMaxTokenizerBytes);
  } catch (const std::runtime_error& e) {
    throw SpecError("tokenizer", e.what());
  }
  std::string config_text = "{}";
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config, ec)) {
    try {
      config_text = read_file(config.string(), kMaxConfigBytes);
    } catch (const std::runtime_error& e) {
      throw SpecError("tokenizer_config", e.what());
    }
  }
  return parse(text, config_text, file.string());
}

Tokenizer Tokenizer::parse(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                           const std::string& source) {
  Tokenizer t;
  t.source_ = source;
  try {
    const json root = parse_json_document(tokenizer_json, source, "tokenizer");
    if (!root.is_object()) throw SpecError("tokenizer", "expected a JSON object");
    check_members(root,
                  {"version", "truncation", "padding", "added_tokens", "normalizer",
                   "pre_tokenizer", "post_processor", "decoder", "model"},
                  "tokenizer");
    if (root.contains("truncation") && !root.at("truncation").is_null()) {
      throw SpecError("truncation", "must be null (kvlab encodes whole texts; cut them yourself)");
    }
    const json config =
        parse_json_document(tokenizer_config_json, "tokenizer_config.json", "tokenizer_config");
    if (!config.is_object()) throw SpecError("tokenizer_config", "expected a JSON object");

    const std::vector<AddedToken> added =
        read_added_tokens(root.contains("added_tokens") ? root.at("added_tokens") : json());
    std::unordered_map<std::string, int32_t> added_ids;
    std::set<std::string> added_contents;
    for (const AddedToken& token : added) {
      added_ids[token.content] = token.id;
      added_contents.insert(token.content);
      if (token.special) t.special_ids_.insert(token.id);
    }

    const json& model = member(root, "model", "tokenizer");
    const std::string model_type = component_type(model, "model");
    if (model_type != "BPE") {
      throw SpecError("model.type", "'" + model_type + "' is not supported (kvlab reads: BPE)");
    }
    t.model_ = std::make_unique<BpeModel>(model, added_ids, "model");
    t.normalizer_ = make_normalizer(root.value("normalizer", json()), "normalizer");
    t.pre_tokenizer_ = make_pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer");
    t.decoder_ = make_token_decoder(root.value("decoder", json()), "decoder", added_contents);
    t.splitter_ = std::make_unique<AddedTokenSplitter>(added);

    if (config.contains("additional_special_tokens") &&
        config.at("additional_special_tokens").is_array()) {
      for (const json& name : config.at("additional_special_tokens")) {
        if (name.is_string() && t.model_->id(name.get<std::string>()) >= 0) {
          t.special_ids_.insert(t.model_->id(name.get<std::string>()));
        }
      }
    }
    const auto token_id = [&](const char* key) -> std::optional<int32_t> {
      const std::optional<std::string> name = config_token(config, key);
      if (!name) return std::nullopt;
      const int32_t id = t.model_->id(*name);
      if (id < 0) {
        throw SpecError(std::string("tokenizer_config.") + key,
                        "'" + *name + "' is not in the vocabulary");
      }
      return id;
    };
    t.bos_id_ = token_id("bos_token");
    t.eos_id_ = token_id("eos_token");

    // The special tokens around the text: the post-processor's template where it has one,
    // else tokenizer_config.json's add_bos_token / add_eos_token (how transformers' Llama
    // tokenizers build their template).
    const json post = root.value("post_processor", json());
    const std::string post_type = post.is_null() ? "" : component_type(post, "post_processor");
    if (post_type == "TemplateProcessing") {
      check_members(post, {"type", "single", "pair", "special_tokens"}, "post_processor");
      const json& single = member(post, "single", "post_processor");
      const json& specials = member(post, "special_tokens", "post_processor");
      if (!single.is_array()) throw SpecError("post_processor.single", "expected an array");
      bool seen_text = false;
      for (size_t i = 0; i < single.size(); ++i) {
        const std::string where = "post_processor.single[" + std::to_string(i) + "]";
        const json& item = single[i];
        if (item.is_object() && item.contains("Sequence")) {
          if (seen_text) throw SpecError(where, "the text appears twice");
          seen_text = true;
          continue;
        }
        if (!item.is_object() || !item.contains("SpecialToken") ||
            !item.at("SpecialToken").is_object()) {
          throw SpecError(where, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        }
        const std::string name =
            string_member(item.at("SpecialToken"), "id", where + ".SpecialToken");
        if (!specials.is_object() || !specials.contains(name) || !specials.at(name).is_object() ||
            !specials.at(name).contains("ids") || !specials.at(name).at("ids").is_array()) {
          throw SpecError("post_processor.special_tokens", "no ids for '" + name + "'");
        }
        for (const json& id : specials.at(name).at("ids")) {
          if (!id.is_number_integer() || t.model_->token(id.get<int32_t>()) == nullptr) {
            throw SpecError("post_processor.special_tokens." + name,
                            "id " + json_excerpt(id) + " is not in the vocabulary");
          }
          (seen_text ? t.suffix_ids_ : t.prefix_ids_).push_back(id.get<int32_t>());
        }
      }
    } else if (post_type.empty() || post_type == "ByteLevel") {
      // ByteLevel post-processing changes offsets only.
      if (config.contains("add_bos_token") &&
          bool_member_or(config, "add_bos_token", false, "tokenizer_config")) {
        if (!t.bos_id_)
          throw SpecError("tokenizer_config.add_bos_token", "true without a bos_token");
        t.prefix_ids_.push_back(*t.bos_id_);
      }
      if (config.contains("add_eos_token") &&
          bool_member_or(config, "add_eos_token", false, "tokenizer_config")) {
        if (!t.eos_id_)
          throw SpecError("tokenizer_config.add_eos_token", "true without an eos_token");
        t.suffix_ids_.push_back(*t.eos_id_);
      }
    } else {
      throw SpecError("post_processor.type", "'" + post_type +
                                                 "' is not supported (kvlab reads: ByteLevel, "
                                                 "TemplateProcessing)");
    }
    // Without tokenizer_config.json, the template's tokens around the text are BOS and EOS.
    if (!t.bos_id_ && !t.prefix_ids_.empty()) t.bos_id_ = t.prefix_ids_.front();
    if (!t.eos_id_ && !t.suffix_ids_.empty()) t.eos_id_ = t.suffix_ids_.back();
  } catch (const SpecError& e) {
    throw SpecError("tokenizer", source + ": " + e.what());
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text, "the text to encode");
  std::vector<AddedTokenSplitter::Section> sections = splitter_->split(text);
  for (size_t i = 0; i < sections.size(); ++i) {
    const AddedToken* token = sections[i].token;
    if (token == nullptr) continue;
    if (token->lstrip && i > 0 && sections[i - 1].token == nullptr) {
      sections[i - 1].text = trim_end(sections[i - 1].text);
    }
    if (token->rstrip && i + 1 < sections.size() && sections[i + 1].token == nullptr) {
      sections[i + 1].text = trim_start(sections[i + 1].text);
    }
  }

  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<std::string> pieces;
  std::vector<int32_t> piece_ids;
  for (const AddedTokenSplitter::Section& section : sections) {
    if (section.token != nullptr) {
      ids.push_back(section.token->id);
      continue;
    }
    if (section.text.empty()) continue;
    std::string normalized(section.text);
    if (normalizer_) normalized = normalizer_->normalize(std::move(normalized));
    if (normalized.empty()) continue;
    pieces.clear();
    if (pre_tokenizer_) {
      pre_tokenizer_->split(normalized, pieces);
    } else {
      pieces.push_back(std::move(normalized));
    }
    for (const std::string& piece : pieces) {
      if (piece.empty()) continue;
      if (piece.size() <= kMaxCachedPieceBytes) {
        const auto hit = cache.find(piece);
        if (hit != cache.end()) {
          ids.insert(ids.end(), hit->second.begin(), hit->second.end());
          continue;
        }
      }
      piece_ids.clear();
      model_->encode(piece, piece_ids);
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
      if (piece.size() <= kMaxCachedPieceBytes) cache.emplace(piece, piece_ids);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* token = model_->token(id);
    if (token == nullptr) {
      throw SpecError("ids", "id " + std::to_string(id) + " is not in the vocabulary of " +
                                 source_ + " (ids 0.." + std::to_string(vocab_size() - 1) + ")");
    }
    if (skip_special_tokens && special_ids_.count(id) != 0) continue;
    tokens.push_back(*token);
  }
  if (!decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i == 0 ? "" : " ") + tokens[i];
    return joined;
  }
  std::string text;
  for (const std::string& part : decoder_->decode_chain(std::move(tokens))) text += part;
  return text;
}

}  // namespace kvlab::tok
