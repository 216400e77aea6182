#include "kernels/weight_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvlab {
namespace {

bool aligned_to(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Every byte of [p, p + bytes) written and read back (a mapping cut short would fault).
void expect_usable(std::byte* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(i * 7 + 1);
  for (std::size_t i = 0; i < bytes; i += 4093) {
    ASSERT_EQ(p[i], static_cast<std::byte>(i * 7 + 1)) << i;
  }
  EXPECT_EQ(p[bytes - 1], static_cast<std::byte>((bytes - 1) * 7 + 1));
}

// The "THPeligible" line of the mapping that starts at `start` in /proc/self/smaps: 1 where the
// kernel may back it with huge pages; -1 where the file has no such line (older kernels).
int thp_eligible(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t from = 0, to = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> from >> dash >> to && dash == '-') {
      inside = from <= reinterpret_cast<std::uintptr_t>(start) &&
               reinterpret_cast<std::uintptr_t>(start) < to;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(WeightAllocatorTest, SmallArraysStartOnACacheLine) {
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{100}, std::size_t{4096}, kHugeWeightBytes - 1}) {
    auto* p = static_cast<std::byte*>(allocate_weight_bytes(bytes));
    EXPECT_TRUE(aligned_to(p, 64)) << bytes;
    expect_usable(p, bytes);
    free_weight_bytes(p, bytes);
  }
}

// From 2 MiB: a mapping of its own on a 2 MiB boundary, every byte usable (a length that is no
// multiple of 4 KiB or of 2 MiB too), released whole.
TEST(WeightAllocatorTest, LargeArraysStartOnAHugePageBoundary) {
  for (std::size_t bytes : {kHugeWeightBytes, 3 * kHugeWeightBytes + 100, std::size_t{5} << 20}) {
    auto* p = static_cast<std::byte*>(allocate_weight_bytes(bytes));
    EXPECT_TRUE(aligned_to(p, kHugeWeightBytes)) << bytes;
    expect_usable(p, bytes);
    free_weight_bytes(p, bytes);
  }
}

// Where the kernel offers transparent huge pages on advice, a weight array's mapping is eligible
// for them (the pages themselves are the kernel's to give: not checked).
TEST(WeightAllocatorTest, LargeArraysAskForHugePages) {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(enabled, modes);
  if (modes.find("[never]") != std::string::npos || modes.empty()) {
    GTEST_SKIP() << "transparent huge pages are off on this machine (" << modes << ")";
  }
  const std::size_t bytes = 2 * kHugeWeightBytes;
  void* p = allocate_weight_bytes(bytes);
  const int eligible = thp_eligible(p);
  free_weight_bytes(p, bytes);
  if (eligible < 0) GTEST_SKIP() << "/proc/self/smaps has no THPeligible line on this kernel";
  EXPECT_EQ(eligible, 1) << "transparent huge pages: " << modes;
}

TEST(WeightAllocatorTest, VectorsGrowAndCopyAcrossTheThreshold) {
  std::vector<float, WeightAllocator<float>> v;
  for (int i = 0; i < 1 << 20; ++i) v.push_back(static_cast<float>(i));  // 4 MiB, grown
  EXPECT_TRUE(aligned_to(v.data(), kHugeWeightBytes));
  const std::vector<float, WeightAllocator<float>> copy = v;
  ASSERT_EQ(copy.size(), v.size());
  EXPECT_EQ(std::memcmp(copy.data(), v.data(), v.size() * sizeof(float)), 0);
  v.resize(10);
  v.shrink_to_fit();
  EXPECT_TRUE(aligned_to(v.data(), 64));
  EXPECT_EQ(v[9], 9.0f);
}

}  // namespace
}  // namespace kvlab
