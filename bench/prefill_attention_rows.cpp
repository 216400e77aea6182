// A prompt chunk's attention: R rows of one sequence at tokens L − R … L − 1 (each seeing its
// sequence up to its own token), through the decode kernels row by row (what FastDecoder::run did
// before prefill_attention) against prefill_attention (AMX bf16 tiles where the CPU has them for
// bf16 caches in bf16 precision, else AVX-512 f32), alternating in one process, medians of 9; one
// layer of H 8 heads: gqa (64 wide in G 2 groups, the 31.7 M model's; bf16 and f32 caches), mla's
// layout (one stream of 64-wide latents and a 16-wide rope stream) and gva dr=0's (one stream of
// values, each head's key rebuilt through its map and rotated on read, f32 arithmetic). The
// measurement behind docs/kernels/dense-decode.md's "Prompt chunks' attention". Not part of the
// build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/prefill_attention_rows.cpp build/src/libkvlab_kernels.a \
//       build/src/libkvlab_cache.a build/src/libkvlab_spec.a build/src/libkvlab_report.a \
//       -ldnnl -lfmt -lpthread -o /tmp/pfa
//   /tmp/pfa 128        # R; on a CPU with AVX-512 (and AMX with AVX-512 BF16 for the tiles)
//   /tmp/pfa 128 avx512 # without AMX: bf16 products by AVX-512 BF16 (Zen 4 / 5's path)
//   /tmp/pfa 128 avx2   # the AVX2 decode kernel against prefill's AVX2 path, f32 arithmetic
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cache/paged_cache.h"
#include "kernels/fast_decoder.h"
#include "kernels/prefill_attention.h"
#include "kernels/rope.h"
using namespace kvlab;

int main(int argc, char** argv) {
  const int64_t R = argc > 1 ? atoi(argv[1]) : 128;
  const int64_t H = 8, G = 2, d = 64;
  ThreadPool pool(2);
  DecodeWorkspace decode_work;
  PrefillWorkspace prefill_work;
  const bool avx2 = argc > 2 && std::string(argv[2]) == "avx2";
  const bool no_amx = argc > 2 && std::string(argv[2]) == "avx512";
  const bool tiles = !avx2 && !no_amx && cpu_supports(CpuIsa::kAmx) && cpu_has_avx512_bf16();
  const bool bf16_products = tiles || (no_amx && cpu_has_avx512_bf16());
  std::printf("R %ld rows, H %ld x %ld, G %ld; bf16 products: %s\n", R, H, d, G,
              tiles           ? "amx"
              : bf16_products ? "avx512 bf16"
                              : "none");
  std::printf("| layout | cache | precision | tokens L | row by row ms | prefill ms | ratio |\n");
  std::printf("|:--|:--|:--|--:|--:|--:|--:|\n");
  struct Layout {
    const char* name;
    DType dtype;
    bool one_stream, rope_stream, rebuild;
    int64_t groups;
  };
  const Layout layouts[] = {{"gqa", DType::kBf16, false, false, false, G},
                            {"gqa", DType::kF32, false, false, false, G},
                            {"mla", DType::kBf16, true, true, false, 1},
                            {"gva dr=0", DType::kBf16, true, false, true, G}};
  std::vector<float> maps(H * d * d);
  std::mt19937 map_rng(2);
  std::uniform_real_distribution<float> map_u(-0.2f, 0.2f);
  for (float& x : maps) x = map_u(map_rng);
  for (const Layout& lay : layouts) {
    const DType dtype = lay.dtype;
    for (int64_t L : {256, 512, 1024, 2048, 4096}) {
      if (lay.rebuild && L > 1024) continue;  // the row-by-row rebuild takes seconds
      CacheLayout layout;
      layout.kernel = lay.one_stream ? DecodeKernel::kOneStream : DecodeKernel::kTwoStream;
      layout.dtype = dtype;
      layout.streams = {{lay.one_stream ? StreamRole::kContent : StreamRole::kKey, lay.groups, d}};
      if (!lay.one_stream) layout.streams.push_back({StreamRole::kValue, lay.groups, d});
      if (lay.rope_stream) layout.streams.push_back({StreamRole::kRope, 1, 16});
      PagedKvCache cache(layout, 1, 16, L / 16 + 1, 1);
      const int32_t seq = cache.add_sequence();
      cache.append(seq, L);
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> u(-1, 1);
      for (int64_t t = 0; t < L; ++t) {
        for (size_t s = 0; s < layout.streams.size(); ++s) {
          std::vector<float> row(layout.streams[s].width());
          for (float& x : row) x = u(rng);
          cache.store_token(0, static_cast<int64_t>(s), seq, t, row.data());
        }
      }
      std::vector<int32_t> seqs(R, seq);
      std::vector<int64_t> tokens(R);
      for (int64_t i = 0; i < R; ++i) tokens[i] = L - R + 1 + i;
      PageTable table;
      cache.page_table_into(seqs.data(), tokens.data(), R, table);
      std::vector<float> q(R * H * d), q_rope(R * H * 16), out(R * H * d);
      for (float& x : q) x = u(rng);
      for (float& x : q_rope) x = u(rng);
      DecodeParams p;
      p.q = q.data();
      p.out = out.data();
      p.key_pool = cache.pool(0, 0);
      p.value_pool = cache.pool(0, lay.one_stream ? 0 : 1);
      if (lay.rope_stream) {
        p.rope_pool = cache.pool(0, 1);
        p.q_rope = q_rope.data();
        p.rope_width = 16;
      }
      if (lay.rebuild) {
        p.key_maps = maps.data();
        p.rope_on_read = true;
      }
      p.pages = table.view();
      p.n_seqs = R;
      p.n_heads = H;
      p.n_groups = lay.groups;
      p.key_width = p.value_width = d;
      p.dtype = dtype;
      p.scale = 0.125f;
      p.precision = dtype == DType::kBf16 && !avx2 ? AttnPrecision::kBf16 : AttnPrecision::kF32;
      const AttnPrecision precision = effective_precision(p);
      std::vector<float> rope_table;
      if (lay.rebuild) {
        rope_table.resize(L * d);
        for (int64_t j = 0; j < L; ++j)
          rope_row(j, d, p.rope_theta, p.rope_scaling, &rope_table[j * d]);
      }
      const float* rope = lay.rebuild ? rope_table.data() : nullptr;
      const auto rows = [&] {
        if (avx2) return decode_attention_avx2(p, pool, decode_work, rope);
        precision == AttnPrecision::kBf16 ? decode_attention_avx512_bf16(p, pool, decode_work, rope)
                                          : decode_attention_avx512(p, pool, decode_work, rope);
      };
      const auto prefill = [&] {
        prefill_attention(p, RowRun{0, R}, pool, prefill_work, rope,
                          avx2            ? PrefillPath::kAvx2
                          : tiles         ? PrefillPath::kAmx
                          : bf16_products ? PrefillPath::kAvx512Bf16
                                          : PrefillPath::kAvx512);
      };
      std::vector<double> ta, tb;
      for (int rep = 0; rep < 9; ++rep) {
        for (int which = 0; which < 2; ++which) {
          const auto t0 = std::chrono::steady_clock::now();
          which == 0 ? rows() : prefill();
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          (which == 0 ? ta : tb).push_back(ms);
        }
      }
      std::sort(ta.begin(), ta.end());
      std::sort(tb.begin(), tb.end());
      std::printf("| %s | %s | %s | %ld | %.3f | %.3f | %.2f |\n", lay.name,
                  dtype_name(dtype).data(), attn_precision_name(precision), L, ta[4], tb[4],
                  ta[4] / tb[4]);
    }
  }
}
