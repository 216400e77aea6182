#pragma once

#include <string>
#include <vector>

namespace kvlab {

// A Markdown table whose columns are padded to line up in a terminal too. Columns whose
// cells all start with a digit (or are "—") are right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // Throws std::invalid_argument if the row's width differs from the header's.
  void add_row(std::vector<std::string> cells);
  std::string to_markdown() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// What every subcommand's --format takes: "table" (Markdown) or "json". Throws
// SpecError("format") naming the value otherwise.
void require_output_format(const std::string& format);

}  // namespace kvlab
