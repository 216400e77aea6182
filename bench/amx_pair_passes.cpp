// How the AMX bf16 dense kernel's walk at 64 rows of x (matvec_amx_bf16_panels.cpp: each pair of
// panels multiplied by x's blocks 0-1 as it streams from memory, then by blocks 2-3 from cache)
// reads its weights, on one thread: bf16 panels of 1,024 inputs (32 KiB each) in matrices of 128
// panels (fewer below 4 MiB), streamed from a buffer of MIB MiB (1024: from memory; 1: from L2),
// x's 64 rows at the kernel's stride (1,056 elements) in L2. Prints the weights' GB/s and the G
// multiply-adds/s that makes, for WALK:
//   pairs    the kernel's two passes (prefetching 4 chunks ahead into L1 in the first)
//   slabs S  per pair, S chunks at a time for blocks 0-1 then 2-3, the sums carried through a
//            buffer between the slabs (the second pass reads the weights from L1)
//   stream   one pass of x's first 16 rows per pair (the walk at 16 rows: a plain tile stream)
// and the options --loads-only (the same tile loads without the multiplies) and --x-in-l1 (x's
// tiles loaded from 16 KiB that stay in L1 instead of its rows). Not part of the build:
//   g++ -O2 -std=c++20 -Isrc -mamx-tile -mamx-bf16 -mavx512f bench/amx_pair_passes.cpp -o /tmp/app
//   /tmp/app WALK [S] [--mib N] [--loads-only] [--x-in-l1]
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/amx_tiles.h"

namespace {

constexpr long kPanelBytes = 32768, kChunks = 32, kPanels = 128, kXStride = 1056;
constexpr long kAheadChunks = 4;

struct Options {
  std::string walk;
  long slab = 8, mib = 1024;
  bool loads_only = false, x_in_l1 = false;
};

inline void prefetch_chunk(const char* chunk) {
  for (int line = 0; line < 16; ++line) _mm_prefetch(chunk + 64 * line, _MM_HINT_T0);
}

// chunk c of panels w0, w1 against x's blocks from row `row` (or the L1 copy), into tiles 0-3
inline __attribute__((always_inline)) void chunk_2x2(const Options& o, const uint16_t* x,
                                                     const uint16_t* x_l1, long row, const char* w0,
                                                     const char* w1, long c) {
  if (o.x_in_l1) {
    _tile_loadd(4, x_l1 + (c % 8) * 512, 64);
    _tile_loadd(5, x_l1 + 4096 + (c % 8) * 512, 64);
  } else {
    _tile_loadd(4, x + row * kXStride + c * 32, kXStride * 2);
    _tile_loadd(5, x + (row + 16) * kXStride + c * 32, kXStride * 2);
  }
  _tile_loadd(6, w0 + c * 1024, 64);
  _tile_loadd(7, w1 + c * 1024, 64);
  if (!o.loads_only) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

void zero_sums() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

void store_sums(float* sums) {
  _tile_stored(0, sums, 64);
  _tile_stored(1, sums + 256, 64);
  _tile_stored(2, sums + 512, 64);
  _tile_stored(3, sums + 768, 64);
}

void load_sums(const float* sums) {
  _tile_loadd(0, sums, 64);
  _tile_loadd(1, sums + 256, 64);
  _tile_loadd(2, sums + 512, 64);
  _tile_loadd(3, sums + 768, 64);
}

// one matrix of `panels` panels at `w`
void matrix(const Options& o, const char* w, long panels, const uint16_t* x, const uint16_t* x_l1) {
  alignas(64) static float sums[2][1024];
  for (long p = 0; p < panels; p += 2) {
    const char* w0 = w + p * kPanelBytes;
    const char* w1 = w0 + kPanelBytes;
    const auto ahead = [&](long c) {
      if (c + kAheadChunks < kChunks) {
        prefetch_chunk(w0 + (c + kAheadChunks) * 1024);
        prefetch_chunk(w1 + (c + kAheadChunks) * 1024);
      }
    };
    if (o.walk == "stream") {
      _tile_zero(0);
      _tile_zero(1);
      for (long c = 0; c < kChunks; ++c) {
        ahead(c);
        _tile_loadd(4, o.x_in_l1 ? x_l1 + (c % 8) * 512 : x + c * 32,
                    o.x_in_l1 ? 64 : kXStride * 2);
        _tile_loadd(6, w0 + c * 1024, 64);
        _tile_loadd(7, w1 + c * 1024, 64);
        if (!o.loads_only) {
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
        }
      }
      _tile_stored(0, sums[0], 64);
      _tile_stored(1, sums[0] + 256, 64);
    } else if (o.walk == "pairs") {
      for (long block_pair = 0; block_pair < 2; ++block_pair) {
        zero_sums();
        for (long c = 0; c < kChunks; ++c) {
          if (block_pair == 0) ahead(c);
          chunk_2x2(o, x, x_l1, 32 * block_pair, w0, w1, c);
        }
        store_sums(sums[block_pair]);
      }
    } else {  // slabs
      for (long s = 0; s < kChunks; s += o.slab) {
        for (long block_pair = 0; block_pair < 2; ++block_pair) {
          if (s == 0) {
            zero_sums();
          } else {
            load_sums(sums[block_pair]);
          }
          for (long c = s; c < s + o.slab; ++c) {
            if (block_pair == 0) ahead(c);
            chunk_2x2(o, x, x_l1, 32 * block_pair, w0, w1, c);
          }
          store_sums(sums[block_pair]);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool ok = argc >= 2;
  for (int i = 1; ok && i < argc; ++i) {
    const std::string a = argv[i];
    if (i == 1) {
      o.walk = a;
      ok = a == "pairs" || a == "slabs" || a == "stream";
    } else if (i == 2 && o.walk == "slabs" && a[0] != '-') {
      o.slab = std::atol(a.c_str());
      ok = o.slab == 1 || o.slab == 2 || o.slab == 4 || o.slab == 8 || o.slab == 16 || o.slab == 32;
    } else if (a == "--mib" && i + 1 < argc) {
      o.mib = std::atol(argv[++i]);
      ok = o.mib >= 1 && o.mib <= 4096;
    } else if (a == "--loads-only") {
      o.loads_only = true;
    } else if (a == "--x-in-l1") {
      o.x_in_l1 = true;
    } else {
      ok = false;
    }
  }
  if (!ok) {
    std::fprintf(stderr,
                 "usage: %s pairs|slabs S|stream [--mib N (1..4096)] [--loads-only] [--x-in-l1]"
                 " (S: 1, 2, 4, 8, 16 or 32 chunks)\n",
                 argv[0]);
    return 2;
  }
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) {
    std::fprintf(stderr, "no AMX tile permission on this CPU / kernel\n");
    return 1;
  }
  const kvlab::AmxTileConfig c = kvlab::full_tiles_config(8);
  _tile_loadconfig(&c);
  const long bytes = o.mib << 20;  // whole matrices of up to kPanels panels
  const long panels = std::min(kPanels, bytes / kPanelBytes);
  const long matrix_bytes = panels * kPanelBytes;
  auto* buffer = static_cast<char*>(std::aligned_alloc(4096, static_cast<size_t>(bytes)));
  std::memset(buffer, 0, static_cast<size_t>(bytes));
  std::vector<uint16_t> x(64 * kXStride + 64, 0x3F80), x_l1(8192, 0x3F80);
  const long passes = std::max(1L, (1L << 30) / bytes);
  const double multiply_adds_per_byte = o.walk == "stream" ? 16.0 / 2 : 64.0 / 2;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (long pass = 0; pass < passes; ++pass) {
      for (long m = 0; m < bytes; m += matrix_bytes)
        matrix(o, buffer + m, panels, x.data(), x_l1.data());
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gbs = static_cast<double>(bytes) * passes / seconds / 1e9;
    std::printf("%s%s%s, weights from %ld MiB: %.1f GB/s of weights, %.0f G multiply-adds/s\n",
                o.walk == "slabs" ? ("slabs of " + std::to_string(o.slab)).c_str() : o.walk.c_str(),
                o.loads_only ? ", loads only" : "", o.x_in_l1 ? ", x in L1" : "", bytes >> 20, gbs,
                gbs * multiply_adds_per_byte);
  }
  _tile_release();
  std::free(buffer);
}
