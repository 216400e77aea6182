#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "kernels/decode_attention.h"
#include "spec/cache_layout.h"

namespace kvlab {

// CSR page table over a batch of sequences (FlashInfer's layout): sequence i owns pages
// page_ids[indptr[i] .. indptr[i+1]), the last of them holding last_page_len[i] tokens.
struct PageTable {
  std::vector<int32_t> indptr;
  std::vector<int32_t> page_ids;
  std::vector<int32_t> last_page_len;
  int32_t page_size = 0;

  int64_t n_seqs() const { return static_cast<int64_t>(last_page_len.size()); }
  int64_t tokens(int64_t seq) const;
  PageTableView view() const {
    return {indptr.data(), page_ids.data(), last_page_len.data(), page_size};
  }
};

class CacheError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A paged KV cache whose streams are exactly the spec's CacheLayout: per layer, one pool per
// stream of [max_pages][n_heads][page_size] head rows in the stream's dtype (row_bytes each; see
// kernels/page_layout.h; the key stream ordered by element pairs where layout.key_order says), all
// carved from one 64-byte-aligned allocation made up front (nothing allocates per token). A page id
// names the same slot in every layer and stream, so one page table serves the whole model.
// Recurrent layouts (linear attention) keep a fixed f32 state per sequence slot instead.
class PagedKvCache {
 public:
  PagedKvCache(const CacheLayout& layout, int64_t n_layers, int64_t page_size, int64_t max_pages,
               int64_t max_seqs);

  // Sequence ids are reused after free_sequence. Throws CacheError when all slots are taken.
  int32_t add_sequence();
  void free_sequence(int32_t seq);
  // Makes room for n more tokens and returns the position of the first of them; throws
  // CacheError, changing nothing, when the free pages do not suffice.
  int64_t append(int32_t seq, int64_t n_tokens);
  // Keeps the first n tokens, returning pages no longer needed.
  void truncate(int32_t seq, int64_t n_tokens);
  int64_t length(int32_t seq) const;

  // Pages owned by the caller (a serving engine's page pool, serve/block_pool.h) from here on:
  // the cache's own free list is emptied; set_pages() gives a sequence its pages, which may be
  // shared with other sequences; append() then only counts tokens into the pages it was given
  // (CacheError where they do not cover them), and truncate() and free_sequence() only drop
  // pages from the sequence, never to a free list.
  void use_external_pages();
  bool external_pages() const { return external_pages_; }
  // Sequence seq holds `pages` (in token order) and its first `length` tokens are in them.
  void set_pages(int32_t seq, const std::vector<int32_t>& pages, int64_t length);
  // Page `to` becomes a copy of page `from`, in every layer and stream.
  void copy_page(int32_t from, int32_t to);

  // Head `head`'s row of `stream` in `layer` for token `pos` of `seq` (pos < length(seq)):
  // layout().head_row_bytes(stream) bytes. A token's heads are not adjacent (page_layout.h).
  // Throws CacheError for the key stream of a cache ordered by pairs (its rows are not
  // contiguous).
  std::byte* head_row(int64_t layer, int64_t stream, int32_t seq, int64_t pos, int64_t head);
  // A token's row of `stream` as f32 [n_heads][head_width], written in the stream's dtype (each
  // head row quantized on its own) and read back.
  void store_token(int64_t layer, int64_t stream, int32_t seq, int64_t pos, const float* row);
  void load_token(int64_t layer, int64_t stream, int32_t seq, int64_t pos, float* row);
  // Base of a stream's page pool: [max_pages][n_heads][page_size] head rows.
  const std::byte* pool(int64_t layer, int64_t stream) const;
  // Recurrent state of a sequence in a layer: layout.state_scalars f32 values.
  float* state(int64_t layer, int32_t seq);
  PageTable page_table(const std::vector<int32_t>& seqs) const;
  // The same, into `table`, reusing its capacity: a decode loop that keeps one PageTable
  // allocates nothing once the table has grown to its largest batch.
  void page_table_into(const std::vector<int32_t>& seqs, PageTable& table) const;
  // Row b of `table` shows sequence seqs[b]'s first tokens[b] tokens (1 <= tokens[b] <= its
  // length; a sequence may take several rows): a prompt's rows in one step, each seeing the
  // tokens up to its own (causal). Throws CacheError naming the row otherwise.
  void page_table_into(const int32_t* seqs, const int64_t* tokens, int64_t n,
                       PageTable& table) const;
  // The position of the layout's stream with `role` (the `stream` argument above); throws
  // CacheError when the layout has none.
  int64_t stream(StreamRole role) const;

  const CacheLayout& layout() const { return layout_; }
  int64_t page_size() const { return page_size_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  // Bytes of the pages (and states) held by live sequences, over all layers and streams.
  int64_t bytes_in_use() const;
  int64_t bytes_allocated() const { return bytes_; }

 private:
  struct Sequence {
    bool live = false;
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  const Sequence& live(int32_t seq) const;
  // Appends a row to `table` showing s's first `tokens` tokens (0 <= tokens <= its length).
  void add_table_row(PageTable& table, const Sequence& s, int64_t tokens) const;
  // The key stream of a KeyOrder::kTokenPairs layout.
  bool pair_ordered(const CacheStream& stream) const;
  // Where head `head` of token `pos` starts: its row, or in a pairs-ordered stream its first
  // element (the others at pair_element_offset(0, e, page_size) from it).
  std::byte* row_place(int64_t layer, int64_t stream, int32_t seq, int64_t pos, int64_t head);
  // The layout's stream `stream`; throws CacheError naming a layer or stream out of range.
  const CacheStream& stream_at(int64_t layer, int64_t stream) const;
  int64_t page_bytes_all_layers() const;

  CacheLayout layout_;
  int64_t n_layers_;
  int64_t page_size_;
  int64_t max_pages_;
  int64_t bytes_ = 0;
  std::unique_ptr<std::byte, void (*)(void*)> memory_;
  std::vector<int64_t> pool_offset_;  // [layer * n_streams + stream]
  int64_t state_offset_ = 0;          // states: [layer][seq][state_scalars] f32
  std::vector<int32_t> free_pages_;
  std::vector<Sequence> seqs_;
  bool external_pages_ = false;
};

}  // namespace kvlab
