#pragma once

#include <string>
#include <vector>

namespace kvlab::data {

// The King James Bible as Debian's bible-kjv prints it (`bible "gen1:1-re22:21"`), split by
// book so that no validation text shares a chapter with training text.
struct KjvSplit {
  std::string train;               // bytes of the training books, in order
  std::string validation;          // bytes of the held-out books, in order
  std::vector<std::string> books;  // every book found, in order
  std::vector<std::string> validation_books;
};

// The held-out books: every tenth book (2 Samuel, Proverbs, Amos, Matthew, Philippians,
// 1 Peter): 373,236 of 4,298,238 bytes (8.7%), from both testaments and several genres.
bool is_validation_book(size_t book_index);

// Reads the text from `path` (a file holding bible's output) or, when path is empty, runs
// `bible "gen1:1-re22:21"`. Throws SpecError("data") when the program is missing (install
// bible-kjv: scripts/install-deps) or the text has no recognisable book headers.
std::string read_kjv_text(const std::string& path);
// Splits bible's output at its book headers (a line "<Book> 1" after a blank line).
KjvSplit split_kjv(const std::string& text);

}  // namespace kvlab::data
