#include "report/units.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "spec/spec_error.h"

namespace kvlab {

ByteUnits parse_byte_units(std::string_view text) {
  if (text == "iec") return ByteUnits::kIec;
  if (text == "si") return ByteUnits::kSi;
  throw SpecError("units", "unknown units '" + std::string(text) +
                               "' (known: iec = KiB/MiB/GiB, si = kB/MB/GB)");
}

std::string format_bytes(int64_t bytes, ByteUnits units) {
  const double base = units == ByteUnits::kIec ? 1024.0 : 1000.0;
  static constexpr const char* kIec[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  static constexpr const char* kSi[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= base && unit < 6) {
    value /= base;
    ++unit;
  }
  const char* name = units == ByteUnits::kIec ? kIec[unit] : kSi[unit];
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10 ? 2 : value < 100 ? 1 : 0, name);
}

std::string format_si(int64_t count) {
  static constexpr const char* kSuffix[] = {"", "k", "M", "G", "T", "P", "E"};
  double value = static_cast<double>(count);
  int unit = 0;
  while (std::fabs(value) >= 1000.0 && unit < 6) {
    value /= 1000.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{}", count);
  const double magnitude = std::fabs(value);
  return fmt::format("{:.{}f} {}", value,
                     magnitude < 10    ? 3
                     : magnitude < 100 ? 2
                                       : 1,
                     kSuffix[unit]);
}

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

int64_t parse_tokens(std::string_view text, const char* field) {
  int64_t multiplier = 1;
  std::string_view digits = text;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    multiplier = 1024;
    digits.remove_suffix(1);
  } else if (!digits.empty() && (digits.back() == 'm' || digits.back() == 'M')) {
    multiplier = 1024 * 1024;
    digits.remove_suffix(1);
  }
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end || value < 0 ||
      __builtin_mul_overflow(value, multiplier, &value)) {
    throw SpecError(field, "'" + std::string(text) +
                               "' is not a token count (an integer, or with k = 1024 / m = 1024²)");
  }
  return value;
}

}  // namespace kvlab
