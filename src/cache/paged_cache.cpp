#include "cache/paged_cache.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/convert.h"
#include "kernels/page_layout.h"

namespace kvlab {
namespace {

constexpr int64_t kAlign = 64;
constexpr int64_t kHugePage = int64_t{2} << 20;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

int64_t PageTable::tokens(int64_t seq) const {
  const int64_t pages = indptr[static_cast<size_t>(seq) + 1] - indptr[static_cast<size_t>(seq)];
  return pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[static_cast<size_t>(seq)];
}

PagedKvCache::PagedKvCache(const CacheLayout& layout, int64_t n_layers, int64_t page_size,
                           int64_t max_pages, int64_t max_seqs)
    : layout_(layout),
      n_layers_(n_layers),
      page_size_(page_size),
      max_pages_(max_pages),
      memory_(nullptr, std::free) {
  if (n_layers <= 0) throw CacheError("layers must be > 0");
  if (page_size <= 0) throw CacheError("page size must be > 0");
  if (max_pages < 0 || max_seqs <= 0) throw CacheError("max pages >= 0 and max sequences > 0");
  if (layout.key_order == KeyOrder::kTokenPairs) {
    const std::string problem = layout.key_pairs_problem();
    if (!problem.empty()) throw CacheError("key_order: " + problem);
    if (page_size % kDecodeBlockTokens != 0) {
      throw CacheError("key_order pairs needs a page size that is a multiple of " +
                       std::to_string(kDecodeBlockTokens) + " tokens, got " +
                       std::to_string(page_size));
    }
  }
  for (int64_t l = 0; l < n_layers; ++l) {
    for (const CacheStream& s : layout.streams) {
      pool_offset_.push_back(bytes_);
      bytes_ += round_up(max_pages * page_size * layout.token_row_bytes(s), kAlign);
    }
  }
  state_offset_ = bytes_;
  bytes_ += round_up(n_layers * max_seqs * layout.state_scalars * 4, kAlign);
  if (bytes_ > 0) {
    // Large caches ask for transparent huge pages (advice; ignored where the kernel does not
    // do it): a 16k-token layer of 4 KiB pages costs the decode kernel 16k page walks a step,
    // nested ones in a virtual machine.
    const bool huge = bytes_ >= kHugePage;
    const int64_t allocated = huge ? round_up(bytes_, kHugePage) : bytes_;
    memory_.reset(static_cast<std::byte*>(
        std::aligned_alloc(huge ? kHugePage : kAlign, static_cast<size_t>(allocated))));
    if (!memory_) throw CacheError("cannot allocate " + std::to_string(bytes_) + " cache bytes");
    if (huge) madvise(memory_.get(), static_cast<size_t>(allocated), MADV_HUGEPAGE);
    std::memset(memory_.get(), 0, static_cast<size_t>(bytes_));
  }
  free_pages_.reserve(static_cast<size_t>(max_pages));
  for (int64_t p = max_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  seqs_.resize(static_cast<size_t>(max_seqs));
  for (Sequence& s : seqs_) s.pages.reserve(static_cast<size_t>(max_pages));
}

int32_t PagedKvCache::add_sequence() {
  for (size_t i = 0; i < seqs_.size(); ++i) {
    if (!seqs_[i].live) {
      seqs_[i].live = true;
      seqs_[i].length = 0;
      if (layout_.state_scalars > 0) {
        for (int64_t l = 0; l < n_layers_; ++l) {
          std::memset(state(l, static_cast<int32_t>(i)), 0,
                      static_cast<size_t>(layout_.state_scalars) * sizeof(float));
        }
      }
      return static_cast<int32_t>(i);
    }
  }
  throw CacheError("all " + std::to_string(seqs_.size()) + " sequence slots are in use");
}

const PagedKvCache::Sequence& PagedKvCache::live(int32_t seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= seqs_.size() ||
      !seqs_[static_cast<size_t>(seq)].live) {
    throw CacheError("no live sequence " + std::to_string(seq));
  }
  return seqs_[static_cast<size_t>(seq)];
}

void PagedKvCache::free_sequence(int32_t seq) {
  truncate(seq, 0);
  seqs_[static_cast<size_t>(seq)].live = false;
}

int64_t PagedKvCache::append(int32_t seq, int64_t n_tokens) {
  live(seq);
  if (n_tokens < 0) throw CacheError("cannot append a negative number of tokens");
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  const int64_t first = s.length;
  if (layout_.streams.empty()) {  // recurrent or cache-free: nothing per token
    s.length += n_tokens;
    return first;
  }
  const int64_t needed =
      (s.length + n_tokens + page_size_ - 1) / page_size_ - static_cast<int64_t>(s.pages.size());
  if (external_pages_ && needed > 0) {
    throw CacheError("sequence " + std::to_string(seq) + " needs " + std::to_string(needed) +
                     " more pages than set_pages gave it");
  }
  if (needed > free_pages()) {
    throw CacheError("cache full: sequence " + std::to_string(seq) + " needs " +
                     std::to_string(needed) + " more pages, " + std::to_string(free_pages()) +
                     " of " + std::to_string(max_pages_) + " are free");
  }
  for (int64_t i = 0; i < needed; ++i) {
    s.pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  s.length += n_tokens;
  return first;
}

void PagedKvCache::truncate(int32_t seq, int64_t n_tokens) {
  live(seq);
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  if (n_tokens < 0 || n_tokens > s.length) {
    throw CacheError("cannot truncate sequence " + std::to_string(seq) + " of " +
                     std::to_string(s.length) + " tokens to " + std::to_string(n_tokens));
  }
  const size_t keep = static_cast<size_t>((n_tokens + page_size_ - 1) / page_size_);
  while (s.pages.size() > keep) {
    if (!external_pages_) free_pages_.push_back(s.pages.back());
    s.pages.pop_back();
  }
  s.length = n_tokens;
}

void PagedKvCache::use_external_pages() {
  for (const Sequence& s : seqs_) {
    if (s.live && !s.pages.empty()) {
      throw CacheError("use_external_pages: sequences already hold the cache's own pages");
    }
  }
  free_pages_.clear();
  external_pages_ = true;
}

void PagedKvCache::set_pages(int32_t seq, const std::vector<int32_t>& pages, int64_t length) {
  live(seq);
  if (!external_pages_) throw CacheError("set_pages needs use_external_pages() first");
  for (const int32_t page : pages) {
    if (page < 0 || page >= max_pages_) {
      throw CacheError("set_pages: page " + std::to_string(page) + " is not one of the " +
                       std::to_string(max_pages_));
    }
  }
  if (length < 0 || length > static_cast<int64_t>(pages.size()) * page_size_) {
    throw CacheError("set_pages: " + std::to_string(length) + " tokens do not fit " +
                     std::to_string(pages.size()) + " pages");
  }
  Sequence& s = seqs_[static_cast<size_t>(seq)];
  s.pages.assign(pages.begin(), pages.end());
  s.length = length;
}

void PagedKvCache::copy_page(int32_t from, int32_t to) {
  if (from < 0 || from >= max_pages_ || to < 0 || to >= max_pages_) {
    throw CacheError("copy_page: pages " + std::to_string(from) + " → " + std::to_string(to) +
                     " out of range");
  }
  for (int64_t layer = 0; layer < n_layers_; ++layer) {
    for (size_t stream = 0; stream < layout_.streams.size(); ++stream) {
      // a page is one block of every head's rows (page_layout.h), in either key order
      const int64_t page_bytes = page_size_ * layout_.token_row_bytes(layout_.streams[stream]);
      std::byte* base = memory_.get() +
                        pool_offset_[static_cast<size_t>(layer) * layout_.streams.size() + stream];
      std::memcpy(base + to * page_bytes, base + from * page_bytes,
                  static_cast<size_t>(page_bytes));
    }
  }
}

int64_t PagedKvCache::length(int32_t seq) const { return live(seq).length; }

const CacheStream& PagedKvCache::stream_at(int64_t layer, int64_t stream) const {
  if (layer < 0 || layer >= n_layers_)
    throw CacheError("layer " + std::to_string(layer) + " of a cache with " +
                     std::to_string(n_layers_));
  if (stream < 0 || stream >= static_cast<int64_t>(layout_.streams.size()))
    throw CacheError("stream " + std::to_string(stream) + " of a layout with " +
                     std::to_string(layout_.streams.size()));
  return layout_.streams[static_cast<size_t>(stream)];
}

bool PagedKvCache::pair_ordered(const CacheStream& stream) const {
  return layout_.key_order == KeyOrder::kTokenPairs && stream.role == StreamRole::kKey;
}

std::byte* PagedKvCache::head_row(int64_t layer, int64_t stream, int32_t seq, int64_t pos,
                                  int64_t head) {
  const CacheStream& st = stream_at(layer, stream);
  if (pair_ordered(st)) {
    throw CacheError(
        "the key stream is ordered by element pairs (key_order pairs): a head's "
        "row is not contiguous; use store_token / load_token");
  }
  return row_place(layer, stream, seq, pos, head);
}

std::byte* PagedKvCache::row_place(int64_t layer, int64_t stream, int32_t seq, int64_t pos,
                                   int64_t head) {
  const CacheStream& st = stream_at(layer, stream);
  const Sequence& s = live(seq);
  if (pos < 0 || pos >= s.length)
    throw CacheError("token " + std::to_string(pos) + " is not cached");
  if (head < 0 || head >= st.n_heads)
    throw CacheError("head " + std::to_string(head) + " of a stream with " +
                     std::to_string(st.n_heads));
  const int64_t page = s.pages[static_cast<size_t>(pos / page_size_)];
  const int64_t offset = pool_offset_[static_cast<size_t>(
      layer * static_cast<int64_t>(layout_.streams.size()) + stream)];
  const int64_t row_bytes = layout_.head_row_bytes(st), in_page = pos % page_size_;
  if (pair_ordered(st)) {  // the group's block, then the token's first element pair
    return memory_.get() + offset +
           page_row_offset(page, 0, head, st.n_heads, page_size_, row_bytes) +
           pair_element_offset(in_page, 0, page_size_);
  }
  return memory_.get() + offset +
         page_row_offset(page, in_page, head, st.n_heads, page_size_, row_bytes);
}

void PagedKvCache::store_token(int64_t layer, int64_t stream, int32_t seq, int64_t pos,
                               const float* row) {
  const CacheStream& st = stream_at(layer, stream);
  const DType dtype = layout_.stream_dtype(st);
  for (int64_t h = 0; h < st.n_heads; ++h) {
    const float* head = row + h * st.head_width;
    if (pair_ordered(st)) {  // from the token's first element pair (row_place)
      std::byte* first = row_place(layer, stream, seq, pos, h);
      for (int64_t e = 0; e < st.head_width; ++e) {
        const uint16_t bits = f32_to_bf16(head[e]);
        std::memcpy(first + pair_element_offset(0, e, page_size_), &bits, sizeof bits);
      }
      continue;
    }
    store_rows(head, 1, st.head_width, dtype, row_place(layer, stream, seq, pos, h));
  }
}

void PagedKvCache::load_token(int64_t layer, int64_t stream, int32_t seq, int64_t pos, float* row) {
  const CacheStream& st = stream_at(layer, stream);
  const DType dtype = layout_.stream_dtype(st);
  for (int64_t h = 0; h < st.n_heads; ++h) {
    float* head = row + h * st.head_width;
    if (pair_ordered(st)) {
      const std::byte* first = row_place(layer, stream, seq, pos, h);
      for (int64_t e = 0; e < st.head_width; ++e) {
        uint16_t bits = 0;
        std::memcpy(&bits, first + pair_element_offset(0, e, page_size_), sizeof bits);
        head[e] = bf16_to_f32(bits);
      }
      continue;
    }
    load_rows(row_place(layer, stream, seq, pos, h), 1, st.head_width, dtype, head);
  }
}

const std::byte* PagedKvCache::pool(int64_t layer, int64_t stream) const {
  return memory_.get() + pool_offset_[static_cast<size_t>(
                             layer * static_cast<int64_t>(layout_.streams.size()) + stream)];
}

float* PagedKvCache::state(int64_t layer, int32_t seq) {
  return reinterpret_cast<float*>(memory_.get() + state_offset_) +
         (layer * static_cast<int64_t>(seqs_.size()) + seq) * layout_.state_scalars;
}

PageTable PagedKvCache::page_table(const std::vector<int32_t>& seqs) const {
  PageTable t;
  page_table_into(seqs, t);
  return t;
}

namespace {

// An empty table of pages of page_size tokens.
void start_table(PageTable& t, int64_t page_size) {
  t.page_size = static_cast<int32_t>(page_size);
  t.indptr.clear();
  t.page_ids.clear();
  t.last_page_len.clear();
  t.indptr.push_back(0);
}

}  // namespace

void PagedKvCache::add_table_row(PageTable& t, const Sequence& s, int64_t tokens) const {
  const int64_t pages = (tokens + page_size_ - 1) / page_size_;
  t.page_ids.insert(t.page_ids.end(), s.pages.begin(), s.pages.begin() + pages);
  t.indptr.push_back(static_cast<int32_t>(t.page_ids.size()));
  t.last_page_len.push_back(tokens == 0 ? 0 : static_cast<int32_t>((tokens - 1) % page_size_ + 1));
}

void PagedKvCache::page_table_into(const std::vector<int32_t>& seqs, PageTable& t) const {
  start_table(t, page_size_);
  for (int32_t seq : seqs) {
    const Sequence& s = live(seq);
    add_table_row(t, s, s.length);
  }
}

void PagedKvCache::page_table_into(const int32_t* seqs, const int64_t* tokens, int64_t n,
                                   PageTable& t) const {
  start_table(t, page_size_);
  for (int64_t b = 0; b < n; ++b) {
    const Sequence& s = live(seqs[b]);
    if (tokens[b] < 1 || tokens[b] > s.length) {
      throw CacheError("page table row " + std::to_string(b) + ": " + std::to_string(tokens[b]) +
                       " tokens of sequence " + std::to_string(seqs[b]) + ", which holds " +
                       std::to_string(s.length));
    }
    add_table_row(t, s, tokens[b]);
  }
}

int64_t PagedKvCache::stream(StreamRole role) const {
  const int64_t i = layout_.stream_index(role);
  if (i < 0) {
    throw CacheError("the cache layout has no " + std::string(stream_role_name(role)) + " stream");
  }
  return i;
}

int64_t PagedKvCache::page_bytes_all_layers() const {
  return n_layers_ * page_size_ * layout_.bytes_per_token();
}

int64_t PagedKvCache::bytes_in_use() const {
  int64_t bytes = 0;
  for (const Sequence& s : seqs_) {
    if (!s.live) continue;
    bytes += static_cast<int64_t>(s.pages.size()) * page_bytes_all_layers() +
             n_layers_ * layout_.state_bytes();
  }
  return bytes;
}

}  // namespace kvlab
