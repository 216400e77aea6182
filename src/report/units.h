#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlab {

// Human units for bytes: IEC (KiB, MiB, GiB = 2^30) or SI (kB, MB, GB = 10^9).
enum class ByteUnits { kIec, kSi };

ByteUnits parse_byte_units(std::string_view text);         // iec | si; throws SpecError("units")
std::string format_bytes(int64_t bytes, ByteUnits units);  // "5.50 GiB", "2.62 GB", "512 B"
std::string format_si(int64_t count);         // "8.030 G", "176.2 M", "512" (4 significant digits)
std::string with_commas(int64_t value);       // "2,621,440,000"
std::string format_percent(double fraction);  // "46.9%"
// Token counts: "32768", "32k" (= 32,768: k is 1024 here), "1m" (= 1,048,576).
int64_t parse_tokens(std::string_view text, const char* field);

}  // namespace kvlab
