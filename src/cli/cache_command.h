#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cli/model_flags.h"

namespace kvlab {

struct CacheOptions {
  ModelFlags model;
  std::vector<std::string> attn;  // one spec per --attn; empty: the model's own
  std::string context = "32k";
  int64_t batch = 1;
  std::string dtype = "bf16";
  std::string format = "table";
  std::string units = "iec";
  bool macs = false;
};

// The default comparison of `kvlab cache` with no arguments.
inline constexpr const char* kCacheDefaultModel = "llama-3-8b";
std::vector<std::string> cache_default_attns();

CLI::App* add_cache_command(CLI::App& app, CacheOptions& options);
// Computes every row first and writes only if all succeed, so an error leaves `out`
// untouched. Throws SpecError (bad input) or std::overflow_error.
void run_cache(const CacheOptions& options, std::ostream& out);

}  // namespace kvlab
