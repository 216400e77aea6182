#pragma once

#include <string>
#include <vector>

namespace kvlab::testing {

// "" if `svg` is a well-formed XML document whose root element is <svg> with width, height
// and the SVG namespace, every tag closed in order, attribute values quoted and text free of
// raw '<' and bare '&'; otherwise what is wrong and where.
inline std::string svg_problem(const std::string& svg) {
  std::vector<std::string> open;
  size_t i = 0, roots = 0;
  if (svg.rfind("<?xml", 0) == 0) {
    i = svg.find("?>");
    if (i == std::string::npos) return "unterminated XML declaration";
    i += 2;
  }
  while (i < svg.size()) {
    if (svg[i] != '<') {
      if (svg[i] == '&') {
        const size_t semi = svg.find(';', i);
        if (semi == std::string::npos || semi - i > 6) return "bare '&' at " + std::to_string(i);
      }
      if (open.empty() && !std::isspace(static_cast<unsigned char>(svg[i]))) {
        return "text outside the root at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = svg.substr(i + 1, end - i - 1);
    // attribute values: quotes must pair up and hold no '<'
    size_t quotes = 0;
    for (char c : tag) {
      if (c == '"') ++quotes;
      if (c == '<') return "'<' inside a tag at " + std::to_string(i);
    }
    if (quotes % 2 != 0) return "unbalanced quotes at " + std::to_string(i);
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
    } else {
      const bool self_closing = !tag.empty() && tag.back() == '/';
      const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
      if (name.empty()) return "empty tag name at " + std::to_string(i);
      if (open.empty()) {
        ++roots;
        if (name != "svg") return "root element is <" + name + ">, not <svg>";
        for (const char* attr : {"width=\"", "height=\"", "xmlns=\"http://www.w3.org/2000/svg\""}) {
          if (tag.find(attr) == std::string::npos) return std::string("root lacks ") + attr;
        }
      }
      if (!self_closing) open.push_back(name);
    }
    i = end + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return "expected one root element, found " + std::to_string(roots);
  return "";
}

}  // namespace kvlab::testing
