#include "report/table.h"

#include <algorithm>
#include <stdexcept>

#include "spec/spec_error.h"

namespace kvlab {
namespace {

// Display width: counts UTF-8 code points, so "×" and "—" count once.
size_t display_width(const std::string& s) {
  size_t width = 0;
  for (unsigned char c : s) width += (c & 0xC0) != 0x80;
  return width;
}

bool looks_numeric(const std::string& cell) {
  return cell == "—" || (!cell.empty() && ((cell[0] >= '0' && cell[0] <= '9') || cell[0] == '-'));
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size()) {
    throw std::invalid_argument("table row has " + std::to_string(cells.size()) +
                                " cells, header " + std::to_string(headers_.size()));
  }
  rows_.push_back(std::move(cells));
}

std::string Table::to_markdown() const {
  const size_t n = headers_.size();
  std::vector<size_t> width(n, 3);
  std::vector<bool> right(n, !rows_.empty());
  for (size_t c = 0; c < n; ++c) {
    width[c] = std::max(width[c], display_width(headers_[c]));
    for (const auto& row : rows_) {
      width[c] = std::max(width[c], display_width(row[c]));
      right[c] = right[c] && looks_numeric(row[c]);
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t c = 0; c < n; ++c) {
      const std::string pad(width[c] - display_width(cells[c]), ' ');
      out.append(" ");
      out.append(right[c] ? pad : cells[c]);
      out.append(right[c] ? cells[c] : pad);
      out.append(" |");
    }
    return out + "\n";
  };
  std::string out = line(headers_) + "|";
  for (size_t c = 0; c < n; ++c) {
    out.append(right[c] ? "" : ":");
    out.append(width[c] + 1, '-');
    out.append(right[c] ? ":|" : "|");
  }
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

void require_output_format(const std::string& format) {
  if (format != "table" && format != "json") {
    throw SpecError("format", "unknown format '" + format.substr(0, 40) + "' (known: table, json)");
  }
}

}  // namespace kvlab
