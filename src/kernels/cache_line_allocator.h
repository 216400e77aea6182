#pragma once

#include <cstddef>
#include <new>

namespace kvlab {

// A std::allocator that starts every array on a 64-byte cache line. The dense layers' packed
// weights use it: their kernels load whole 64-byte vectors, and from the heap's 16-byte alignment
// each such load straddled two lines (bf16 panels at one row of x measured ~5% slower so).
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};

  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

}  // namespace kvlab
