#pragma once

#include <cstdint>
#include <stdexcept>

namespace kvlab {

// A non-negative count (parameters, bytes, MACs) whose arithmetic throws instead of
// wrapping: a 671B-parameter model at a million tokens must give an exact answer or an
// error, never a silently wrong number.
class Exact {
 public:
  constexpr Exact(int64_t value = 0) : value_(value) {}  // NOLINT: implicit by design

  constexpr int64_t value() const { return value_; }

  friend Exact operator+(Exact a, Exact b) {
    int64_t out = 0;
    if (__builtin_add_overflow(a.value_, b.value_, &out)) throw overflow();
    return Exact(out);
  }
  friend Exact operator*(Exact a, Exact b) {
    int64_t out = 0;
    if (__builtin_mul_overflow(a.value_, b.value_, &out)) throw overflow();
    return Exact(out);
  }
  Exact& operator+=(Exact b) { return *this = *this + b; }
  friend bool operator==(Exact a, Exact b) { return a.value_ == b.value_; }

 private:
  static std::overflow_error overflow() {
    return std::overflow_error("count exceeds 2^63 - 1 (reduce context, batch or model size)");
  }
  int64_t value_;
};

}  // namespace kvlab
