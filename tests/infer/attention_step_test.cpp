// AttentionStep::for_rows: the batch's per-sequence work, split over the decoder's pool from
// kRowsOnPoolElements elements — every row handled exactly once, in contiguous shares, and an
// exception in a share rethrown on the calling thread.
#include "infer/attention_step.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvlab::infer {
namespace {

CacheLayout small_layout() {
  return {DecodeKernel::kTwoStream,
          {{StreamRole::kKey, 1, 8}, {StreamRole::kValue, 1, 8}},
          DType::kF32};
}

TEST(AttentionStepTest, ForRowsCoversEveryRowOnceInContiguousShares) {
  PagedKvCache cache(small_layout(), /*n_layers=*/1, /*page_size=*/4, /*max_pages=*/4,
                     /*max_seqs=*/1);
  FastDecoder decoder(2);
  AttentionStep step(cache, decoder, 8);
  for (int64_t rows : {1, 2, 3, 17, 64, 129}) {
    for (int64_t width : {int64_t{1}, kRowsOnPoolElements / 16, kRowsOnPoolElements}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " × " + std::to_string(width));
      std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
      std::atomic<int> shares{0};
      step.for_rows(rows, width, [&](int64_t first, int64_t last) {
        ASSERT_LE(0, first);
        ASSERT_LT(first, last);
        ASSERT_LE(last, rows);
        ++shares;
        for (int64_t b = first; b < last; ++b) ++seen[static_cast<size_t>(b)];
      });
      for (int64_t b = 0; b < rows; ++b) EXPECT_EQ(seen[static_cast<size_t>(b)], 1) << b;
      EXPECT_EQ(shares, rows >= 2 && rows * width >= kRowsOnPoolElements ? 2 : 1);
    }
  }
}

TEST(AttentionStepTest, ForRowsRethrowsAShareException) {
  PagedKvCache cache(small_layout(), 1, 4, 4, 1);
  FastDecoder decoder(2);
  AttentionStep step(cache, decoder, 8);
  for (int64_t failing : {0, 63, 64, 127}) {  // in the first share or the second
    SCOPED_TRACE(failing);
    std::atomic<int64_t> done{0};
    EXPECT_THROW(step.for_rows(128, kRowsOnPoolElements,
                               [&](int64_t first, int64_t last) {
                                 for (int64_t b = first; b < last; ++b) {
                                   if (b == failing) throw std::runtime_error("row failed");
                                   ++done;
                                 }
                               }),
                 std::runtime_error);
    EXPECT_LT(done, 128);
    // the pool is usable after it
    std::atomic<int64_t> rows{0};
    step.for_rows(128, kRowsOnPoolElements,
                  [&](int64_t first, int64_t last) { rows += last - first; });
    EXPECT_EQ(rows, 128);
  }
}

}  // namespace
}  // namespace kvlab::infer
