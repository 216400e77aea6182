// The AMX bf16 tile loop of the dense kernels (matvec_amx_bf16_tiles.inc's tile_block: four sums
// tiles, two x and two weight tiles loaded a chunk) on one thread with its operands in cache,
// against the same multiplies without loads and the loads without multiplies; and three other
// orders of the same work (x one block against two panels with its operands double-buffered;
// loads between the multiplies; the next chunk's operands loaded before this chunk's
// multiplies). G multiply-adds/s (the loads-only column: the multiplies those loads would feed).
// Where a tile unit is shared or throttled, the loop with loads is the column that moves; bench
// compute's "bf16 tiles loaded" row is the same loop on every thread. Not part of the build:
//   g++ -O2 -std=c++20 -mamx-tile -mamx-bf16 -mavx512f bench/amx_tile_loop.cpp -o /tmp/atl
//   /tmp/atl IN XS      (IN inputs a row: 256 keeps every operand in L1, 1024 in L2; XS: x's row
//                        stride in elements, e.g. 272 and 1040 as the kernels pad them)
//   taskset -c CPU /tmp/atl ...   to pin it to one vCPU
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

enum class Order {
  kLoadsThenMultiplies,
  kMultipliesOnly,
  kLoadsOnly,
  kDoubleBuffered,
  kInterleaved,
  kOneAhead
};

// rounds of every chunk of IN inputs over x (two blocks of 16 rows, xs apart) and w (two panels)
template <Order kOrder>
double run(const uint16_t* x, const uint16_t* w, int64_t in, int64_t xs, long rounds) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
  const int64_t chunks = in / 32, stride = 16 * in, xb = xs * 2;
  const auto start = std::chrono::steady_clock::now();
  for (long r = 0; r < rounds; ++r) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const uint16_t* wc = w + ch * 512;
      const uint16_t* xc = x + ch * 32;
      if constexpr (kOrder == Order::kLoadsThenMultiplies || kOrder == Order::kLoadsOnly) {
        _tile_loadd(4, xc, xb);
        _tile_loadd(6, wc, 64);
        _tile_loadd(7, wc + stride, 64);
        _tile_loadd(5, xc + 16 * xs, xb);
      }
      if constexpr (kOrder == Order::kLoadsThenMultiplies || kOrder == Order::kMultipliesOnly) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if constexpr (kOrder == Order::kInterleaved) {
        _tile_loadd(4, xc, xb);
        _tile_loadd(6, wc, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, wc + stride, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, xc + 16 * xs, xb);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if constexpr (kOrder == Order::kDoubleBuffered) {  // one x block, two panels
        if (ch % 2 == 0) {
          _tile_loadd(2, xc, xb);
          _tile_loadd(4, wc, 64);
          _tile_loadd(5, wc + stride, 64);
          _tile_dpbf16ps(0, 2, 4);
          _tile_dpbf16ps(1, 2, 5);
        } else {
          _tile_loadd(3, xc, xb);
          _tile_loadd(6, wc, 64);
          _tile_loadd(7, wc + stride, 64);
          _tile_dpbf16ps(0, 3, 6);
          _tile_dpbf16ps(1, 3, 7);
        }
      }
      if constexpr (kOrder == Order::kOneAhead) {  // one x block, two panels
        const uint16_t* wn = w + ((ch + 1) % chunks) * 512;
        const uint16_t* xn = x + ((ch + 1) % chunks) * 32;
        if (ch % 2 == 0) {
          _tile_loadd(5, xn, xb);
          _tile_loadd(6, wn, 64);
          _tile_loadd(7, wn + stride, 64);
          _tile_dpbf16ps(0, 2, 3);
          _tile_dpbf16ps(1, 2, 4);
        } else {
          _tile_loadd(2, xn, xb);
          _tile_loadd(3, wn, 64);
          _tile_loadd(4, wn + stride, 64);
          _tile_dpbf16ps(0, 5, 6);
          _tile_dpbf16ps(1, 5, 7);
        }
      }
    }
    alignas(64) float sums[256];
    _tile_stored(0, sums, 64);
    _tile_stored(3, sums, 64);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  _tile_release();
  const int multiplies = kOrder == Order::kDoubleBuffered || kOrder == Order::kOneAhead ? 2 : 4;
  return static_cast<double>(rounds) * chunks * multiplies * 16 * 16 * 32 / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t in = argc == 3 ? std::atoll(argv[1]) : 0, xs = argc == 3 ? std::atoll(argv[2]) : 0;
  if (in < 64 || in > 2048 || in % 32 != 0 || xs < in || xs > 4096) {
    std::fprintf(stderr, "usage: %s IN (64..2048, a multiple of 32) XS (IN..4096)\n", argv[0]);
    return 2;
  }
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
    std::fprintf(stderr, "no AMX tile permission on this CPU / kernel\n");
    return 1;
  }
  std::vector<uint16_t> x(static_cast<size_t>(32 * xs + 64), 0x3C00),
      w(static_cast<size_t>(32 * in), 0x3C00);
  const long rounds = 200000 * 64 / in;
  for (int k = 0; k < 3; ++k) {
    std::printf(
        "in %lld, x stride %lld: loads then multiplies %.0f, multiplies only %.0f, loads only "
        "%.0f, double-buffered 1x2 %.0f, interleaved %.0f, one chunk ahead 1x2 %.0f G/s\n",
        static_cast<long long>(in), static_cast<long long>(xs),
        run<Order::kLoadsThenMultiplies>(x.data(), w.data(), in, xs, rounds),
        run<Order::kMultipliesOnly>(x.data(), w.data(), in, xs, rounds),
        run<Order::kLoadsOnly>(x.data(), w.data(), in, xs, rounds),
        run<Order::kDoubleBuffered>(x.data(), w.data(), in, xs, rounds),
        run<Order::kInterleaved>(x.data(), w.data(), in, xs, rounds),
        run<Order::kOneAhead>(x.data(), w.data(), in, xs, rounds));
  }
}
