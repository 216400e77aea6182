#include "kernels/process_memory.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace kvlab {
namespace {

// Touches every page, as a tensor's first write does.
void* allocate_and_touch(size_t bytes) {
  void* block = std::malloc(bytes);
  if (block != nullptr) std::memset(block, 1, bytes);
  return block;
}

TEST(ProcessMemoryTest, FreedActivationSizedBlocksStayInTheHeapForReuse) {
  ASSERT_TRUE(keep_freed_memory_for_reuse());
  constexpr size_t kBytes = size_t{8} << 20;  // an activation of the bench train model
  const struct mallinfo2 before = ::mallinfo2();
  void* block = allocate_and_touch(kBytes);
  ASSERT_NE(block, nullptr);
  const struct mallinfo2 during = ::mallinfo2();
  // glibc's default serves this with an mmap of its own (hblks + 1) and unmaps it on free
  EXPECT_EQ(during.hblks, before.hblks) << "an 8 MiB block was mapped on its own";
  std::free(block);
  const struct mallinfo2 after = ::mallinfo2();
  EXPECT_EQ(after.arena, during.arena) << "the heap was trimmed back on free";
  EXPECT_GE(after.fordblks, kBytes) << "the freed block is not kept for the next allocation";
  // the same pages come back for the next block of that size
  void* again = allocate_and_touch(kBytes);
  EXPECT_EQ(::mallinfo2().arena, during.arena) << "the heap grew for a block it had free";
  std::free(again);
}

// Above 32 MiB a block that the heap's free top cannot hold is still an mmap of its own (and
// this shows the first test's hblks would see one).
TEST(ProcessMemoryTest, BlocksAboveGlibcsLimitAreStillMappedOnTheirOwn) {
  ASSERT_TRUE(keep_freed_memory_for_reuse());
  const struct mallinfo2 before = ::mallinfo2();
  void* block = allocate_and_touch(size_t{256} << 20);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(::mallinfo2().hblks, before.hblks + 1);
  std::free(block);
  EXPECT_EQ(::mallinfo2().hblks, before.hblks);
}

TEST(ProcessMemoryTest, TunablesForAChildProcessSayTheSameSettings) {
  EXPECT_EQ(glibc_tunables_for_reuse(),
            "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"
            ":glibc.malloc.top_pad=67108864");
}

}  // namespace
}  // namespace kvlab
