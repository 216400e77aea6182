#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace kvlab {
namespace {

std::string valid_file() {
  static const double f64[3] = {1.5, -2.0, 3.25};
  static const float f32[4] = {1, 2, 3, 4};
  static const uint16_t bf16[2] = {0x3F80, 0xC000};
  static const int8_t i8[5] = {-1, 2, -3, 4, -5};
  static const uint8_t flags[1] = {1};
  return serialize_safetensors(
      {{"model.layers.0.self_attn.q_proj.weight", StDtype::kF32, {2, 2}, f32, sizeof f32},
       {"a.f64", StDtype::kF64, {3}, f64, sizeof f64},
       {"b.bf16", StDtype::kBF16, {2, 1}, bf16, sizeof bf16},
       {"c.i8", StDtype::kI8, {5}, i8, sizeof i8},
       {"d.bool", StDtype::kBool, {}, flags, sizeof flags},
       {"e.empty", StDtype::kF16, {0, 3}, nullptr, 0}},
      {{"format", "pt"}});
}

// A header-only file with the given JSON header and data buffer.
std::string with_header(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    SafetensorsFile::parse(bytes, "test.safetensors");
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  const std::string bytes = valid_file();
  const SafetensorsFile file = SafetensorsFile::parse(bytes, "x");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_EQ(file.tensors().size(), 6u);
  const TensorInfo& q = file.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 2}));
  float values[4];
  std::memcpy(values, file.data(q), sizeof values);
  EXPECT_EQ(values[3], 4.0f);
  const TensorInfo& f64 = file.at("a.f64");
  double d[3];
  std::memcpy(d, file.data(f64), sizeof d);
  EXPECT_EQ(d[2], 3.25);
  EXPECT_EQ(file.at("d.bool").numel(), 1);
  EXPECT_EQ(file.at("e.empty").nbytes(), 0u);
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_THROW(file.at("nope"), SafetensorsError);
}

TEST(SafetensorsTest, HeaderIsPaddedAndTensorsAligned) {
  const std::string bytes = valid_file();
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  const SafetensorsFile file = SafetensorsFile::parse(bytes, "x");
  for (const TensorInfo& t : file.tensors()) {
    EXPECT_EQ((8 + header_len + t.begin) % st_dtype_bytes(t.dtype), 0u) << t.name;
  }
}

TEST(SafetensorsTest, RejectsBrokenFilesNamingTheRule) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "too short"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), "exceeds the 100 MB limit"},
      {with_header("{}").substr(0, 9), "runs past the end"},
      {with_header("[1]"), "does not start with '{'"},
      {with_header("{\"a\": "), "not valid UTF-8 JSON"},
      {with_header("{\"\xc3\x28\": 1}"), "not valid UTF-8 JSON"},
      {with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   std::string(8, '\0')),
       "tensor 'w' appears twice"},
      {with_header(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})",
                   std::string(12, '\0')),
       "hold 12 bytes but shape [2, 2] of F32 needs 16"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                       "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}})",
                   std::string(5, '\0')),
       "(a gap)"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                       "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})",
                   std::string(3, '\0')),
       "(an overlap)"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}})",
                   std::string(3, '\0')),
       "begin at 1"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})",
                   std::string(5, '\0')),
       "data buffer holds 5"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                   std::string(2, '\0')),
       "data buffer holds 2"},
      {with_header(R"({"a": {"dtype": "U8", "shape": [0], "data_offsets": [2, 0]}})"),
       "end before they begin"},
      {with_header(R"({"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}})"),
       "unsupported dtype 'F128'"},
      {with_header(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})"),
       "non-negative integers"},
      {with_header(R"({"a": {"dtype": "F64",
                             "shape": [4294967296, 4294967296, 4294967296],
                             "data_offsets": [0, 8]}})"),
       "overflows"},
      {with_header(R"({"a": {"dtype": "F32", "shape": [1]}})"), "data_offsets must be"},
      {with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})"),
       "unknown field 'x'"},
      {with_header(R"({"__metadata__": {"format": 1}})"), "is not a string"},
  };
  for (const auto& [bytes, message] : cases) {
    const std::string error = parse_error(bytes);
    EXPECT_NE(error.find(message), std::string::npos)
        << "wanted '" << message << "', got '" << error << "'";
    EXPECT_EQ(error.rfind("test.safetensors: ", 0), 0u) << error;
  }
}

TEST(SafetensorsTest, EveryTruncationIsAnErrorNeverACrash) {
  const std::string bytes = valid_file();
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(parse_error(bytes.substr(0, len)).empty()) << "length " << len;
  }
}

TEST(SafetensorsTest, RandomCorruptionIsAnErrorOrAValidFile) {
  const std::string bytes = valid_file();
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string corrupt = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      corrupt[rng() % corrupt.size()] = static_cast<char>(rng() & 0xFF);
    }
    try {
      const SafetensorsFile file = SafetensorsFile::parse(corrupt, "x");
      for (const TensorInfo& t : file.tensors()) {  // what parses must be readable
        EXPECT_LE(t.end, corrupt.size());
      }
    } catch (const SafetensorsError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(SafetensorsTest, WriterRefusesInconsistentInput) {
  const float x[2] = {1, 2};
  EXPECT_THROW(serialize_safetensors({{"a", StDtype::kF32, {3}, x, sizeof x}}, {}),
               SafetensorsError);
  EXPECT_THROW(
      serialize_safetensors(
          {{"a", StDtype::kF32, {2}, x, sizeof x}, {"a", StDtype::kF32, {2}, x, sizeof x}}, {}),
      SafetensorsError);
  EXPECT_THROW(serialize_safetensors({{"__metadata__", StDtype::kF32, {2}, x, sizeof x}}, {}),
               SafetensorsError);
}

TEST(SafetensorsTest, AtomicWriteLeavesNoTemporaryAndReadsBack) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/kvlab_st_test.safetensors";
  const float x[2] = {1, 2};
  write_safetensors(path, {{"a", StDtype::kF32, {2}, x, sizeof x}}, {{"format", "pt"}});
  const SafetensorsFile file = SafetensorsFile::read(path);
  EXPECT_EQ(file.at("a").numel(), 2);
  EXPECT_THROW(SafetensorsFile::read(dir + "/missing.safetensors"), SafetensorsError);
  EXPECT_THROW(SafetensorsFile::read(dir), SafetensorsError);  // a directory
  EXPECT_THROW(write_safetensors("/nonexistent-dir/x.safetensors",
                                 {{"a", StDtype::kF32, {2}, x, sizeof x}}, {}),
               std::runtime_error);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvlab
