#include <gtest/gtest.h>

#include "report/table.h"
#include "report/units.h"
#include "spec/spec_error.h"

namespace kvlab {
namespace {

TEST(UnitsTest, BytesNameTheirUnit) {
  EXPECT_EQ(format_bytes(512, ByteUnits::kIec), "512 B");
  EXPECT_EQ(format_bytes(176 << 20, ByteUnits::kIec), "176 MiB");
  EXPECT_EQ(format_bytes(int64_t{4} << 30, ByteUnits::kIec), "4.00 GiB");
  EXPECT_EQ(format_bytes(2'621'440'000, ByteUnits::kSi), "2.62 GB");
  EXPECT_EQ(format_bytes(10'485'760'000, ByteUnits::kSi), "10.5 GB");
  EXPECT_EQ(parse_byte_units("si"), ByteUnits::kSi);
  EXPECT_THROW(parse_byte_units("GB"), SpecError);
}

TEST(UnitsTest, CountsAndPercents) {
  EXPECT_EQ(with_commas(0), "0");
  EXPECT_EQ(with_commas(999), "999");
  EXPECT_EQ(with_commas(1000), "1,000");
  EXPECT_EQ(with_commas(2621440000), "2,621,440,000");
  EXPECT_EQ(format_si(8'030'261'248), "8.030 G");
  EXPECT_EQ(format_si(950), "950");
  EXPECT_EQ(format_percent(0.46875), "46.9%");
}

TEST(UnitsTest, TokenCounts) {
  EXPECT_EQ(parse_tokens("32768", "context"), 32768);
  EXPECT_EQ(parse_tokens("32k", "context"), 32768);
  EXPECT_EQ(parse_tokens("1m", "context"), 1 << 20);
  EXPECT_EQ(parse_tokens("0", "context"), 0);
  for (const char* bad :
       {"", "k", "-5", "3.5k", "12x", "99999999999999999999", "9223372036854775807k"}) {
    EXPECT_THROW(parse_tokens(bad, "context"), SpecError) << bad;
  }
}

TEST(TableTest, MarkdownWithAlignedColumns) {
  Table t({"attn", "bytes"});
  t.add_row({"gqa:8", "131,072"});
  t.add_row({"mla:dc=512,dr=64", "36,864"});
  EXPECT_EQ(t.to_markdown(),
            "| attn             |   bytes |\n"
            "|:-----------------|--------:|\n"
            "| gqa:8            | 131,072 |\n"
            "| mla:dc=512,dr=64 |  36,864 |\n");
  EXPECT_THROW(t.add_row({"only one"}), std::invalid_argument);
}

}  // namespace
}  // namespace kvlab
