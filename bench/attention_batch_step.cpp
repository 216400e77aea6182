// One layer's decode attention over a batch of short sequences, the shape of a batched step of
// the d 1024 × 16 model (`kvlab bench generate`: gqa:4, 16 heads of 64, bf16 cache, attention in
// bf16): BATCH sequences of CONTEXT tokens each, over LAYERS caches stepped in turn (1: the same
// cache again and again, in L2/L3; 16: the model's 16 layers, from memory as in a step), steps
// back to back on a warm pool. Prints the median and 10th-percentile µs of 400 steps, three
// times. `kvlab bench decode` times the same kernel one step a round between bandwidth probes,
// over enough layers to defeat the LLC: on a noisy VM its median at this size moved ±30%
// between runs, too much to compare two builds by.
// Not part of the build; after `make build`:
//   g++ -O2 -std=c++20 -I. -Isrc bench/attention_batch_step.cpp \
//       src/experiments/decode_bench_row.cpp build/src/libkvlab_cache.a \
//       build/src/libkvlab_kernels.a build/src/libkvlab_spec.a build/src/libkvlab_report.a \
//       -ldnnl -lfmt -lpthread -o /tmp/abs
//   /tmp/abs BATCH CONTEXT LAYERS [SPEC [CACHE [PRECISION]]]   (defaults 64 48 16 gqa:4 bf16;
//   SPEC any attention spec at that shape, e.g. gva:4,dr=16; CACHE f32 | bf16 | f16 | q8_0 |
//   q4_0; PRECISION f32 | bf16 | int8, by default bf16 on a bf16 cache, int8 on q8_0 / q4_0,
//   else f32)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "experiments/decode_bench_row.h"
#include "spec/attention_spec.h"

using namespace kvlab;

namespace {

int run(int argc, char** argv) {
  const auto arg = [&](int i, int64_t fallback, int64_t most) {
    const int64_t v = argc > i ? std::atoll(argv[i]) : fallback;
    if (v < 1 || v > most) {
      std::fprintf(stderr,
                   "usage: %s [BATCH 1..4096] [CONTEXT 1..65536] [LAYERS 1..64] [SPEC [CACHE "
                   "[PRECISION]]]\n",
                   argv[0]);
      std::exit(2);
    }
    return v;
  };
  const int64_t batch = arg(1, 64, 4096), context = arg(2, 48, 65536), layers = arg(3, 16, 64);
  FastDecoder decoder(2);
  ModelShape shape = ModelShape::llama_decoder(/*n_layers=*/1, /*d_model=*/1024, /*n_heads=*/16,
                                               /*mlp_width=*/4096, /*vocab_size=*/1000,
                                               /*max_context=*/0);
  shape.head_dim = 64;
  const std::string spec_text = argc > 4 ? argv[4] : "gqa:4";
  const DType cache = parse_dtype(argc > 5 ? argv[5] : "bf16", "CACHE");
  const AttnPrecision precision = argc > 6 ? parse_attn_precision(argv[6], "PRECISION")
                                  : cache == DType::kBf16 ? AttnPrecision::kBf16
                                  : cache == DType::kQ8_0 || cache == DType::kQ4_0
                                      ? AttnPrecision::kInt8
                                      : AttnPrecision::kF32;
  AttentionSpec spec = AttentionSpec::parse(spec_text, shape, cache);
  spec.key_cache_order = fastest_key_order(spec.cache_layout());
  spec.validate();
  std::mt19937 rng(1);
  DecodeRow row = make_row(spec, precision, context, batch, layers, rng, decoder);
  std::printf("%s, H 16 x 64, %s cache (%s keys), %s attention, 2 threads, %s\n", spec_text.c_str(),
              std::string(dtype_name(cache)).c_str(), key_order_name(spec.key_cache_order),
              std::string(attn_precision_name(precision)).c_str(),
              std::string(cpu_isa_name(decoder.isa())).c_str());
  for (int round = 0; round < 3; ++round) {
    std::vector<double> micros;
    for (int r = 0; r < 400; ++r) {
      const auto start = std::chrono::steady_clock::now();
      row.step(decoder, r);
      micros.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(micros.begin(), micros.end());
    std::printf(
        "batch %ld x %ld tokens, %ld layers: median %.1f us, p10 %.1f (%.2f us a sequence)\n",
        static_cast<long>(batch), static_cast<long>(context), static_cast<long>(layers),
        micros[200], micros[40], micros[200] / static_cast<double>(batch));
  }
  return 0;
}

}  // namespace

// A bad SPEC, CACHE or PRECISION is reported by the parser's message, not a crash.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
}
