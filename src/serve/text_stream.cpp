#include "serve/text_stream.h"

#include <algorithm>

namespace kvlab::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

TextStream::TextStream(Decode decode, std::vector<std::string> stop)
    : decode_(std::move(decode)), stop_(std::move(stop)) {}

std::string TextStream::push(int64_t token) {
  if (stopped_) return {};
  tokens_.push_back(static_cast<int32_t>(token));
  // The whole text is decoded again: a token's bytes depend on its neighbours (byte-level BPE
  // pieces of one character, SentencePiece's leading space).
  const std::string full = decode_(tokens_);
  if (full.size() < sent_.size() || full.compare(0, sent_.size(), sent_) != 0) {
    // the decoder rewrote text already sent (a U+FFFD that completed differently): the new text
    // starts where the two agree no more; what was sent stays sent
    return {};
  }
  const std::string_view fresh = std::string_view(full).substr(sent_.size());
  // a stop string starts at or after the text sent: the text before it never held one
  size_t stop_at = std::string_view::npos;
  for (const std::string& s : stop_) stop_at = std::min(stop_at, fresh.find(s));
  if (stop_at != std::string_view::npos) {
    stopped_ = true;
    const std::string out(fresh.substr(0, stop_at));
    sent_ += out;
    return out;
  }
  size_t keep = fresh.size();
  if (ends_with(fresh, kReplacement)) keep -= kReplacement.size();  // may complete next token
  // hold back the longest tail that begins a stop string
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, keep); n > hold; --n) {
      if (fresh.substr(keep - n, n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  const std::string out(fresh.substr(0, keep - hold));
  sent_ += out;
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  const std::string full = decode_(tokens_);
  stopped_ = true;
  if (full.size() < sent_.size() || full.compare(0, sent_.size(), sent_) != 0) return {};
  const std::string out = full.substr(sent_.size());
  sent_ += out;
  return out;
}

}  // namespace kvlab::serve
