#include "report/statistics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvlab {
namespace {

TEST(StatisticsTest, MedianIsTheUpperMiddleElement) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({7.0}), 7.0);
  EXPECT_EQ(median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 3.0);  // upper of 2 and 3
  EXPECT_EQ(min_of({4.0, -1.0, 3.0}), -1.0);
  EXPECT_EQ(max_of({4.0, -1.0, 3.0}), 4.0);
}

TEST(StatisticsTest, MeanAndSampleStandardDeviation) {
  // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squared deviations sum to 32, sample variance 32 / 7
  const auto [mean, std] = mean_std({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(mean, 5.0);
  EXPECT_DOUBLE_EQ(std, std::sqrt(32.0 / 7.0));
  EXPECT_EQ(mean_std({3.5}), std::make_pair(3.5, 0.0));
  const auto [none_mean, none_std] = mean_std({});
  EXPECT_TRUE(std::isnan(none_mean));
  EXPECT_TRUE(std::isnan(none_std));
}

}  // namespace
}  // namespace kvlab
