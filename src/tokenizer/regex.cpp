#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "spec/spec_error.h"

namespace kvlab::tok {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& field)
    : compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw SpecError(field, "invalid regular expression at offset " + std::to_string(error_offset) +
                               ": " + reinterpret_cast<const char*>(message));
  }
  // Without JIT (an unsupported CPU) the interpreter gives the same matches, slower.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    // The text was checked once by the caller: PCRE2 need not check it on every call.
    const int rc = pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw SpecError("pattern", std::string("regular expression search failed: ") +
                                     reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    matches.emplace_back(begin, end);
    if (end > begin) {
      offset = end;
    } else {
      if (end >= text.size()) break;
      offset = end + 1;
      while (offset < text.size() && (static_cast<uint8_t>(text[offset]) & 0xC0) == 0x80) ++offset;
    }
  }
  return matches;
}

std::string replace_all(std::string_view text, const Regex& pattern, std::string_view content) {
  std::string out;
  size_t copied = 0;
  for (const auto& [begin, end] : pattern.find_all(text)) {
    out.append(text.substr(copied, begin - copied));
    out.append(content);
    copied = end;
  }
  out.append(text.substr(copied));
  return out;
}

std::string escape_regex(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace kvlab::tok
