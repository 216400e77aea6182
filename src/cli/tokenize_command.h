#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <ostream>
#include <string>

namespace kvlab {

struct TokenizeOptions {
  std::string tokenizer;  // tokenizer.json or the folder holding it
  std::string input;      // read this file instead of stdin
  bool ids = false;       // text -> ids (the default)
  bool tokens = false;    // text -> one "id<TAB>token<TAB>text" line per token
  bool decode = false;    // ids -> text
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
};

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& options);
// Reads all of `in`, writes the result to `out`. Throws SpecError for a bad tokenizer, text
// that is not UTF-8, or (--decode) a word that is not an id of the vocabulary.
int run_tokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out);

}  // namespace kvlab
