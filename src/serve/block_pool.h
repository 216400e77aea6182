#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvlab::serve {

// The serving engine's KV pages: who holds each page (reference counts) and, for prefix caching,
// which full pages hold which tokens. A full page is content-addressed by a hash chain — its
// hash covers its parent page's hash and its own token ids, so equal hashes mean equal prefixes
// up to and including the page — as vLLM's automatic prefix caching does. A page no sequence
// holds stays cached (and findable) until the pool needs it: such pages are evicted least
// recently released first. Lookups check the stored tokens and parent, so a hash collision is a
// miss, never a wrong page. No libtorch; the pages' contents are the cache's (PagedKvCache).
class BlockPool {
 public:
  // prefix_caching false: full pages are never published and lookups find nothing.
  BlockPool(int64_t n_pages, int64_t page_size, bool prefix_caching = true);

  int64_t n_pages() const { return static_cast<int64_t>(pages_.size()); }
  int64_t page_size() const { return page_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Pages that allocate() can hand out now: free ones and cached ones no sequence holds.
  int64_t available() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  // Pages some sequence holds.
  int64_t in_use() const { return n_pages() - available(); }
  int32_t refcount(int32_t page) const;
  // Whether the page is published in the prefix cache (its contents must not change).
  bool cached(int32_t page) const;

  // A page for one holder (reference count 1), or nullopt when every page is held. Takes a free
  // page first, else evicts the least recently released cached one.
  std::optional<int32_t> allocate();
  // One more holder of a page that has one, or of a cached page that has none (it leaves the
  // eviction order).
  void retain(int32_t page);
  // One holder fewer; at none the page is free, or evictable if it is cached.
  void release(int32_t page);

  // The hash of a full page of `tokens` (page_size of them) after a page of hash `parent`
  // (nullopt: the sequence's first page).
  static uint64_t chain_hash(std::optional<uint64_t> parent, std::span<const int64_t> tokens);
  // Publishes a full page the caller holds, with the tokens it holds and its parent's hash.
  // Returns the page's hash. Where an equal page is already cached this one is not published
  // (the cached one stays the one found).
  uint64_t publish(int32_t page, std::optional<uint64_t> parent, std::span<const int64_t> tokens);
  // The cached pages of the longest run of tokens' whole pages, from the first, each retained
  // for the caller (who releases them).
  struct Match {
    std::vector<int32_t> pages;
    std::vector<uint64_t> hashes;  // each matched page's hash
  };
  Match match_prefix(std::span<const int64_t> tokens);

 private:
  struct Page {
    int32_t refs = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::optional<uint64_t> parent;
    std::vector<int64_t> tokens;                  // a cached page's tokens
    std::list<int32_t>::iterator evictable_at{};  // valid while cached with no holder
  };
  Page& page(int32_t id);
  const Page& page(int32_t id) const;
  void uncache(int32_t id);

  int64_t page_size_;
  bool prefix_caching_;
  std::vector<Page> pages_;
  std::vector<int32_t> free_;     // neither held nor cached
  std::list<int32_t> evictable_;  // cached, not held: least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace kvlab::serve
