#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace kvlab {

// Arrays on 64-byte cache lines: the kernels read their scratch (x rounded or quantized, a row of
// x an AMX tile row) in whole 64-byte vectors and tile rows, and from the heap's 16-byte alignment
// each of those reads straddled two lines (docs/kernels/dense-decode.md measured what it cost).
constexpr std::size_t kCacheLineBytes = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;

  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{kCacheLineBytes}); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <class T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace kvlab
