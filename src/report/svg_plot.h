#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvlab {

// Plots as standalone SVG 1.1 documents, written directly (no plotting dependency).

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), finite values only are drawn
};

// Lines of several series on shared axes with ticks, labels and a legend.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series);

// A matrix as a grey-scale heat map, white = the smallest value, black = the largest; one
// cell per entry, row 0 at the top, with a labelled colour scale.
std::string svg_heat_map(const std::string& title, const std::string& x_label,
                         const std::string& y_label,
                         const std::vector<std::vector<double>>& values);

// Grouped bars: one group a category (labelled below, turned 30°), one bar a series in each
// group (series[i].points[c].second is category c's value; x is ignored), a legend, the y axis
// from 0. Non-finite values draw no bar.
std::string svg_bar_chart(const std::string& title, const std::string& y_label,
                          const std::vector<std::string>& categories,
                          const std::vector<Series>& series);

// Escapes &, <, >, " for SVG text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace kvlab
