#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvlab::tok {

// A compiled PCRE2 pattern over UTF-8 with Unicode properties (\p{L}, and \s, \w, \d by their
// Unicode meaning), JIT-compiled where PCRE2 can. Immutable after construction; each search
// uses its own match data, so one Regex serves many threads.
class Regex {
 public:
  // Throws SpecError(field) with PCRE2's message and the offset when the pattern is invalid.
  Regex(const std::string& pattern, const std::string& field);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // [begin, end) of every non-overlapping match of valid UTF-8 `text`, left to right (after an
  // empty match the search moves on one character).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// `text` with every match of `pattern` replaced by `content` (literally, no back-references).
std::string replace_all(std::string_view text, const Regex& pattern, std::string_view content);

// `pattern` with every regex metacharacter escaped, so PCRE2 matches it literally.
std::string escape_regex(std::string_view literal);

}  // namespace kvlab::tok
