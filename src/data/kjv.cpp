#include "data/kjv.h"

#include <cstdio>
#include <memory>
#include <sstream>

#include "data/task.h"
#include "io/atomic_file.h"
#include "spec/spec_error.h"

namespace kvlab::data {
namespace {

constexpr const char* kBibleCommand = "bible \"gen1:1-re22:21\" 2>/dev/null";

// "Genesis 12" -> ("Genesis", 12); anything else -> ("", 0). Book names may hold digits and
// spaces ("1 Samuel", "Song of Solomon"); verse lines start with spaces.
std::pair<std::string, int> chapter_header(const std::string& line) {
  if (line.empty() || line[0] == ' ') return {"", 0};
  const size_t space = line.rfind(' ');
  if (space == std::string::npos || space == 0 || space + 1 >= line.size()) return {"", 0};
  int chapter = 0;
  for (size_t i = space + 1; i < line.size(); ++i) {
    if (line[i] < '0' || line[i] > '9') return {"", 0};
    chapter = chapter * 10 + (line[i] - '0');
  }
  return {line.substr(0, space), chapter};
}

}  // namespace

bool is_validation_book(size_t book_index) { return book_index % 10 == 9; }

std::string read_kjv_text(const std::string& path) {
  if (!path.empty()) {
    try {
      return read_file(path, kMaxTextBytes);
    } catch (const std::runtime_error& e) {
      throw SpecError("data", e.what());
    }
  }
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(kBibleCommand, "r"), ::pclose);
  if (!pipe) throw SpecError("data", "cannot run the bible program");
  std::ostringstream text;
  char buffer[1 << 16];
  size_t n, total = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) {
    text.write(buffer, static_cast<std::streamsize>(n));
    total += n;
  }
  const int status = ::pclose(pipe.release());
  if (status != 0 || total < 1000000) {
    throw SpecError("data",
                    "the King James text comes from Debian's bible-kjv package (`bible "
                    "\"gen1:1-re22:21\"`), which is missing or failed: install it with "
                    "scripts/install-deps, or pass --data FILE holding bible's output");
  }
  return text.str();
}

KjvSplit split_kjv(const std::string& text) {
  KjvSplit out;
  std::istringstream in(text);
  std::string line, previous = "";
  std::string* target = &out.train;
  bool first_line = true;
  while (std::getline(in, line)) {
    const auto [book, chapter] = chapter_header(line);
    if (!book.empty() && (previous.empty() || first_line) &&
        (out.books.empty() || book != out.books.back())) {
      if (chapter != 1) {
        throw SpecError("data", "book '" + book + "' starts at chapter " + std::to_string(chapter) +
                                    ": not the whole bible");
      }
      out.books.push_back(book);
      const bool held_out = is_validation_book(out.books.size() - 1);
      if (held_out) out.validation_books.push_back(book);
      target = held_out ? &out.validation : &out.train;
    }
    if (!out.books.empty()) target->append(line).push_back('\n');
    previous = line;
    first_line = false;
  }
  if (out.books.size() < 10 || out.validation.empty()) {
    throw SpecError("data", "found " + std::to_string(out.books.size()) +
                                " book headers: not the output of `bible \"gen1:1-re22:21\"`");
  }
  return out;
}

}  // namespace kvlab::data
