#pragma once

#include <string>

namespace kvlab {

// How the key stream's rows sit inside a page's group of page_size rows.
//  kRows: each row's elements consecutive, [page_size][width] (every stream, every dtype).
//  kTokenPairs: 16-bit elements stored pair-major, [width / 2][page_size][2]: pair i of 16
//    consecutive tokens is one 64-byte vector (the "VNNI" order of a dot product's second
//    operand), so a score pass puts tokens in lanes — a block's scores come out of the
//    multiply-adds as one vector, with no horizontal sums. bf16 keys of two-stream caches
//    only; the value stream keeps rows (its pass sums over tokens: rows suit it).
// The group's block starts where row 0 of kRows would and has the same size, so only the
// addressing inside it differs (kernels/page_layout.h).
enum class KeyOrder { kRows, kTokenPairs };

inline const char* key_order_name(KeyOrder order) {
  return order == KeyOrder::kTokenPairs ? "pairs" : "rows";
}
// "rows" or "pairs"; false otherwise.
inline bool parse_key_order(const std::string& text, KeyOrder& order) {
  if (text == "rows" || text == "pairs") {
    order = text == "rows" ? KeyOrder::kRows : KeyOrder::kTokenPairs;
    return true;
  }
  return false;
}

}  // namespace kvlab
