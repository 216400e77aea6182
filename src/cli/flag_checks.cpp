#include "cli/flag_checks.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "io/json_document.h"

namespace kvlab {
namespace {

template <typename Int>
std::string integer_error(const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  if (!std::is_signed_v<Int> && !digits.empty() && digits.front() == '-') {
    return "'" + text_excerpt(text, 40) + "' is negative; this flag takes a count >= 0";
  }
  Int value{};
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error == std::errc::invalid_argument ||
      end != digits.data() + digits.size()) {
    return "'" + text_excerpt(text, 40) + "' is not a whole number";
  }
  if (error == std::errc::result_out_of_range) {
    return "'" + text_excerpt(text, 40) + "' does not fit " +
           (std::is_signed_v<Int> ? "a signed" : "an unsigned") + " 64-bit integer";
  }
  return "";
}

std::string finite_error(const std::string& text) {
  // CLI11 converts after the checks; strtod is what it uses
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) return "";  // not a number at all: CLI11's own message says so
  if (!std::isfinite(value)) return "'" + text_excerpt(text, 40) + "' is not a finite number";
  return "";
}

void add_checks(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    // a range check appends its description: "FLOAT in [0 - 1e+06]"
    const std::string type = option->get_type_name();
    auto is = [&](const char* name) {
      return type.rfind(name, 0) == 0 &&
             (type.size() == std::strlen(name) ||
              !std::isalpha(static_cast<unsigned char>(type[std::strlen(name)])));
    };
    if (is("INT")) {
      option->check(CLI::Validator(integer_error<int64_t>, "", "integer"));
    } else if (is("UINT")) {
      option->check(CLI::Validator(integer_error<uint64_t>, "", "unsigned integer"));
    } else if (is("FLOAT")) {
      option->check(CLI::Validator(finite_error, "", "finite"));
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) add_checks(*sub);
}

}  // namespace

void check_numeric_flags(CLI::App& app) { add_checks(app); }

}  // namespace kvlab
