#include "report/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>

#include "svg_check.h"

namespace kvlab {
namespace {

using testing::svg_problem;

TEST(SvgPlotTest, LineChartIsWellFormedWithEveryInput) {
  const std::vector<Series> series = {{"mha", {{0, 5.5}, {10, 3.2}, {20, 2.9}}},
                                      {"q<k & \"v\"", {{0, 5.6}, {10, NAN}, {20, 3.0}}},
                                      {"empty", {}}};
  const std::string svg = svg_line_chart("loss <curves>", "step", "loss & more", series);
  EXPECT_EQ(svg_problem(svg), "");
  EXPECT_NE(svg.find("q&lt;k &amp; &quot;v&quot;"), std::string::npos);  // escaped legend
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg_problem(svg_line_chart("nothing", "x", "y", {})), "");
  EXPECT_EQ(svg_problem(svg_line_chart("flat", "x", "y", {{"c", {{1, 2}, {1, 2}}}})), "");
}

// Bars: one rect a finite value, its height proportional to the value (the axis starts at 0).
TEST(SvgPlotTest, BarChartHasOneBarPerFiniteValue) {
  const std::vector<Series> series = {{"held", {{0, 4.0}, {0, 16.0}}},
                                      {"ran", {{0, 6.0}, {0, NAN}}}};
  const std::string svg = svg_bar_chart("<bars>", "sequences", {"mha", "gqa & 2"}, series);
  EXPECT_EQ(svg_problem(svg), "");
  EXPECT_NE(svg.find("gqa &amp; 2"), std::string::npos);
  std::vector<double> heights;
  for (size_t at = svg.find("<rect x="); at != std::string::npos;
       at = svg.find("<rect x=", at + 1)) {
    const size_t h = svg.find("height=\"", at) + 8;
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    if (tag.find("fill=\"#") == std::string::npos ||
        tag.find("width=\"24\"") != std::string::npos) {
      continue;  // the background, the frame and the legend's swatches
    }
    heights.push_back(std::stod(svg.substr(h)));
  }
  // in category order: mha's 4 (held) and 6 (ran), gqa's 16 (held); the NaN draws nothing
  ASSERT_EQ(heights.size(), 3u);
  EXPECT_NEAR(heights[1] / heights[0], 1.5, 0.01);
  EXPECT_NEAR(heights[2] / heights[0], 4.0, 0.01);
  EXPECT_EQ(svg_problem(svg_bar_chart("empty", "y", {}, {})), "");
}

TEST(SvgPlotTest, HeatMapHasOneCellPerEntry) {
  const std::vector<std::vector<double>> m = {{0.0, 0.5, 1.0}, {1.0, NAN, 0.25}};
  const std::string svg = svg_heat_map("map", "key", "query", m);
  EXPECT_EQ(svg_problem(svg), "");
  size_t cells = 0;
  for (size_t at = svg.find("fill=\"rgb("); at != std::string::npos;
       at = svg.find("fill=\"rgb(", at + 1)) {
    ++cells;
  }
  EXPECT_EQ(cells, 6u + 10u);                                  // entries + colour scale
  EXPECT_NE(svg.find("rgb(0,0,0)"), std::string::npos);        // the largest value is black
  EXPECT_NE(svg.find("rgb(255,255,255)"), std::string::npos);  // the smallest white
  EXPECT_EQ(svg_problem(svg_heat_map("empty", "x", "y", {})), "");
}

TEST(SvgPlotTest, TheCheckerRejectsBrokenDocuments) {
  EXPECT_NE(svg_problem("<svg width=\"1\" height=\"1\">"), "");
  EXPECT_NE(svg_problem("<html></html>"), "");
  EXPECT_NE(svg_problem("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\">"
                        "<g></svg></g>"),
            "");
  EXPECT_NE(svg_problem("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\">"
                        "a & b</svg>"),
            "");
}

}  // namespace
}  // namespace kvlab
