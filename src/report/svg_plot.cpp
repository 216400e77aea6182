#include "report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvlab {
namespace {

// Colour-blind-safe palette (Okabe–Ito), then repeated darker.
const char* const kColours[] = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442",
                                "#0072B2", "#D55E00", "#CC79A7", "#666666", "#8B4513",
                                "#7B68EE", "#2E8B57", "#B22222", "#4682B4"};

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo;
  const double raw = span / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (span / step <= 6) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * span; t += step) out.push_back(t);
  return out;
}

std::string number(double v) {
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)) return fmt::format("{:.2g}", v);
  return fmt::format("{:g}", std::round(v * 1e4) / 1e4);
}

std::string header(int width, int height, const std::string& title) {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
      width, height, width, height, width, height, width / 2, xml_escape(title));
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series) {
  const int width = 900, height = 540, left = 70, right = 230, top = 40, bottom = 60;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
    }
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  const double y_pad = 0.03 * (y_hi - y_lo);
  y_lo -= y_pad, y_hi += y_pad;
  auto px = [&](double x) { return left + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return top + (y_hi - y) / (y_hi - y_lo) * plot_h; };
  std::string svg = header(width, height, title);
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
      top, plot_w, plot_h);
  for (double t : ticks(x_lo, x_hi)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(t), top, top + plot_h, top + plot_h + 16, number(t));
  }
  for (double t : ticks(y_lo, y_hi)) {
    svg += fmt::format(
        "<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        py(t), left, left + plot_w, left - 6, py(t) + 4, number(t));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     left + plot_w / 2, height - 15, xml_escape(x_label));
  svg += fmt::format(
      "<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
      "{0})\">{1}</text>\n",
      top + plot_h / 2, xml_escape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const char* colour = kColours[i % std::size(kColours)];
    const char* dash = i < std::size(kColours) ? "" : " stroke-dasharray=\"6 3\"";
    std::string points;
    for (const auto& [x, y] : series[i].points) {
      if (std::isfinite(x) && std::isfinite(y))
        points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    }
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>\n", colour,
        dash, points);
    const int ly = top + 10 + static_cast<int>(i) * 18;
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>\n"
        "<text x=\"{5}\" y=\"{6}\">{7}</text>\n",
        left + plot_w + 12, ly, left + plot_w + 36, colour, dash, left + plot_w + 42, ly + 4,
        xml_escape(series[i].name));
  }
  return svg + "</svg>\n";
}

std::string svg_bar_chart(const std::string& title, const std::string& y_label,
                          const std::vector<std::string>& categories,
                          const std::vector<Series>& series) {
  const int width = 900, height = 540, left = 70, right = 230, top = 40, bottom = 120;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  double y_hi = 0;
  for (const Series& s : series) {
    for (const auto& point : s.points) {
      if (std::isfinite(point.second)) y_hi = std::max(y_hi, point.second);
    }
  }
  if (y_hi <= 0) y_hi = 1;
  y_hi *= 1.05;
  auto py = [&](double y) { return top + (y_hi - y) / y_hi * plot_h; };
  std::string svg = header(width, height, title);
  for (double t : ticks(0, y_hi)) {
    svg += fmt::format(
        "<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        py(t), left, left + plot_w, left - 6, py(t) + 4, number(t));
  }
  const double group_w = categories.empty()
                             ? plot_w
                             : static_cast<double>(plot_w) / static_cast<double>(categories.size());
  const double bar_w = group_w * 0.8 / static_cast<double>(std::max<size_t>(1, series.size()));
  for (size_t c = 0; c < categories.size(); ++c) {
    const double x0 = left + static_cast<double>(c) * group_w + group_w * 0.1;
    for (size_t i = 0; i < series.size(); ++i) {
      if (c >= series[i].points.size() || !std::isfinite(series[i].points[c].second)) continue;
      const double v = std::max(0.0, series[i].points[c].second);
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
          x0 + static_cast<double>(i) * bar_w, py(v), bar_w, py(0) - py(v),
          kColours[i % std::size(kColours)]);
    }
    const double label_x = x0 + group_w * 0.4;
    svg += fmt::format(
        "<text x=\"{0:.1f}\" y=\"{1}\" text-anchor=\"end\" transform=\"rotate(-30 {0:.1f} "
        "{1})\">{2}</text>\n",
        label_x, top + plot_h + 14, xml_escape(categories[c]));
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
      top, plot_w, plot_h);
  svg += fmt::format(
      "<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
      "{0})\">{1}</text>\n",
      top + plot_h / 2, xml_escape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const int ly = top + 10 + static_cast<int>(i) * 18;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"24\" height=\"10\" fill=\"{}\"/>\n"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        left + plot_w + 12, ly - 5, kColours[i % std::size(kColours)], left + plot_w + 42, ly + 4,
        xml_escape(series[i].name));
  }
  return svg + "</svg>\n";
}

std::string svg_heat_map(const std::string& title, const std::string& x_label,
                         const std::string& y_label,
                         const std::vector<std::vector<double>>& values) {
  const size_t rows = values.size();
  const size_t cols = rows > 0 ? values[0].size() : 0;
  const int plot = 480, left = 60, top = 40;
  const double cell_w = cols > 0 ? static_cast<double>(plot) / static_cast<double>(cols) : plot;
  const double cell_h = rows > 0 ? static_cast<double>(plot) / static_cast<double>(rows) : plot;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& row : values) {
    for (double v : row) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi <= lo) hi = lo + 1;
  std::string svg = header(left + plot + 110, top + plot + 50, title);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < values[r].size() && c < cols; ++c) {
      const double v = values[r][c];
      const int grey =
          std::isfinite(v) ? static_cast<int>(std::lround(255 * (hi - v) / (hi - lo))) : 255;
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
          "fill=\"rgb({},{},{})\"/>\n",
          left + static_cast<double>(c) * cell_w, top + static_cast<double>(r) * cell_h,
          cell_w + 0.05, cell_h + 0.05, grey, grey, grey);
    }
  }
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", left,
      top, plot, plot);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", left + plot / 2,
                     top + plot + 30, xml_escape(x_label));
  svg += fmt::format(
      "<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
      "{0})\">{1}</text>\n",
      top + plot / 2, xml_escape(y_label));
  // colour scale: 10 steps from the largest (top, black) to the smallest (bottom, white)
  const int scale_x = left + plot + 20;
  for (int i = 0; i < 10; ++i) {
    const int grey = static_cast<int>(std::lround(255.0 * i / 9));
    svg +=
        fmt::format("<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"{}\" fill=\"rgb({},{},{})\"/>\n",
                    scale_x, top + i * plot / 10, plot / 10 + 1, grey, grey, grey);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n<text x=\"{}\" y=\"{}\">{}</text>\n",
                     scale_x + 22, top + 10, number(hi), scale_x + 22, top + plot, number(lo));
  return svg + "</svg>\n";
}

}  // namespace kvlab
