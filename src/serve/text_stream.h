#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kvlab::serve {

// A request's generated tokens turned into text as they come, for streaming: each push returns
// the text that is now final. Text is held back while it ends in an incomplete UTF-8 character
// (the decoder shows it as U+FFFD) or in what may be the start of a stop string; a stop string
// ends the text before it (OpenAI's API does not return it). decode: the tokenizer's ids -> text.
class TextStream {
 public:
  using Decode = std::function<std::string(std::span<const int32_t>)>;
  TextStream(Decode decode, std::vector<std::string> stop);

  // The new final text after one more token ("" once stopped).
  std::string push(int64_t token);
  // The text held back, at the end of generation (nothing after a stop string).
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return sent_; }

 private:
  Decode decode_;
  std::vector<std::string> stop_;
  std::vector<int32_t> tokens_;
  std::string sent_;  // the text returned so far
  bool stopped_ = false;
};

}  // namespace kvlab::serve
