#include "serve/block_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvlab::serve {
namespace {

// splitmix64's finaliser: every input bit moves every output bit.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

BlockPool::BlockPool(int64_t n_pages, int64_t page_size, bool prefix_caching)
    : page_size_(page_size), prefix_caching_(prefix_caching) {
  if (n_pages <= 0 || n_pages > INT32_MAX) {
    throw std::invalid_argument("block pool: n_pages must be in 1..2^31-1, got " +
                                std::to_string(n_pages));
  }
  if (page_size <= 0) {
    throw std::invalid_argument("block pool: page_size must be positive, got " +
                                std::to_string(page_size));
  }
  pages_.resize(static_cast<size_t>(n_pages));
  free_.reserve(static_cast<size_t>(n_pages));
  // handed out from the back: page 0 first
  for (int64_t id = n_pages - 1; id >= 0; --id) free_.push_back(static_cast<int32_t>(id));
}

BlockPool::Page& BlockPool::page(int32_t id) {
  if (id < 0 || id >= n_pages()) {
    throw std::out_of_range("block pool: page " + std::to_string(id) + " out of range");
  }
  return pages_[static_cast<size_t>(id)];
}

const BlockPool::Page& BlockPool::page(int32_t id) const {
  return const_cast<BlockPool*>(this)->page(id);
}

int32_t BlockPool::refcount(int32_t id) const { return page(id).refs; }

bool BlockPool::cached(int32_t id) const { return page(id).cached; }

std::optional<int32_t> BlockPool::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    evictable_.pop_front();
    uncache(id);
  } else {
    return std::nullopt;
  }
  pages_[static_cast<size_t>(id)].refs = 1;
  return id;
}

void BlockPool::uncache(int32_t id) {
  Page& p = page(id);
  const auto found = by_hash_.find(p.hash);
  if (found != by_hash_.end() && found->second == id) by_hash_.erase(found);
  p.cached = false;
  p.parent.reset();
  p.tokens.clear();
}

void BlockPool::retain(int32_t id) {
  Page& p = page(id);
  if (p.refs == 0) {
    if (!p.cached) throw std::logic_error("block pool: retain of free page " + std::to_string(id));
    evictable_.erase(p.evictable_at);
  }
  ++p.refs;
}

void BlockPool::release(int32_t id) {
  Page& p = page(id);
  if (p.refs <= 0) {
    throw std::logic_error("block pool: release of page " + std::to_string(id) +
                           " that no one holds");
  }
  if (--p.refs > 0) return;
  if (p.cached) {
    p.evictable_at = evictable_.insert(evictable_.end(), id);
  } else {
    free_.push_back(id);
  }
}

uint64_t BlockPool::chain_hash(std::optional<uint64_t> parent, std::span<const int64_t> tokens) {
  uint64_t h = mix(parent.has_value() ? *parent ^ 0x5851F42D4C957F2Dull : 0x14057B7EF767814Full);
  for (const int64_t t : tokens) h = mix(h ^ static_cast<uint64_t>(t));
  return h;
}

uint64_t BlockPool::publish(int32_t id, std::optional<uint64_t> parent,
                            std::span<const int64_t> tokens) {
  if (static_cast<int64_t>(tokens.size()) != page_size_) {
    throw std::invalid_argument("block pool: publish of a page with " +
                                std::to_string(tokens.size()) + " tokens, not " +
                                std::to_string(page_size_));
  }
  Page& p = page(id);
  if (p.refs <= 0) throw std::logic_error("block pool: publish of a page no one holds");
  const uint64_t hash = chain_hash(parent, tokens);
  if (!prefix_caching_ || p.cached || by_hash_.count(hash) != 0) return hash;
  p.cached = true;
  p.hash = hash;
  p.parent = parent;
  p.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, id);
  return hash;
}

BlockPool::Match BlockPool::match_prefix(std::span<const int64_t> tokens) {
  Match match;
  if (!prefix_caching_) return match;
  std::optional<uint64_t> parent;
  for (size_t start = 0; start + static_cast<size_t>(page_size_) <= tokens.size();
       start += static_cast<size_t>(page_size_)) {
    const std::span<const int64_t> chunk = tokens.subspan(start, static_cast<size_t>(page_size_));
    const uint64_t hash = chain_hash(parent, chunk);
    const auto found = by_hash_.find(hash);
    if (found == by_hash_.end()) break;
    const Page& p = page(found->second);
    if (p.parent != parent || !std::equal(chunk.begin(), chunk.end(), p.tokens.begin())) break;
    retain(found->second);
    match.pages.push_back(found->second);
    match.hashes.push_back(hash);
    parent = hash;
  }
  return match;
}

}  // namespace kvlab::serve
