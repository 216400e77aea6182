#pragma once

#include <cstdint>

#include "spec/key_order.h"

namespace kvlab {

// Where a head row sits in a stream's page pool. A pool holds pages of page_size tokens, and
// inside a page each head's rows are consecutive: [page][n_heads][page_size] rows of row_bytes
// (FlashInfer's "HND" paged layout; vLLM's paged blocks are laid out the same way).
// A decode unit (a block of tokens × one group) then reads one contiguous run per stream
// instead of n_heads-strided rows. slot = page id × page_size + the token's place in its page.
// The distance between two heads' rows of one token: the decode kernels find each block's head-0
// rows once and step from them.
constexpr int64_t head_stride_bytes(int64_t page_size, int64_t row_bytes) {
  return page_size * row_bytes;
}
// The place from the page id and the token's place in it, where a kernel has them apart (a
// division by the page size per row costs a decode kernel measurably).
constexpr int64_t page_row_offset(int64_t page_id, int64_t in_page, int64_t head, int64_t n_heads,
                                  int64_t page_size, int64_t row_bytes) {
  return (page_id * n_heads * page_size + in_page) * row_bytes +
         head * head_stride_bytes(page_size, row_bytes);
}
constexpr int64_t head_row_offset(int64_t slot, int64_t head, int64_t n_heads, int64_t page_size,
                                  int64_t row_bytes) {
  return page_row_offset(slot / page_size, slot % page_size, head, n_heads, page_size, row_bytes);
}

// kTokenPairs: the byte offset of element e of the token at in_page from its group's block.
constexpr int64_t pair_element_offset(int64_t in_page, int64_t e, int64_t page_size) {
  return ((e / 2 * page_size + in_page) * 2 + e % 2) * 2;
}
// kTokenPairs: bytes from one element pair of a token to the next (a pair-row of the page).
constexpr int64_t pair_row_stride_bytes(int64_t page_size) { return page_size * 4; }

}  // namespace kvlab
