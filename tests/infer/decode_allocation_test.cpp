// A whole model's decode step allocates nothing once warm: embedding, projections, norms,
// RoPE, the attention kernel over the paged cache (or linear attention's state), MLP or
// mixture of experts, LM head — every variant, with every heap allocation of the process
// counted (tests/alloc_counter.cpp; C-level allocations too outside sanitizer builds).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "alloc_counter.h"
#include "infer/generator.h"
#include "nn/nn_test_util.h"

namespace kvlab::infer {
namespace {

ModelShape shape_of(PosScheme pos, bool llama, bool moe) {
  ModelShape s = testing::small_shape(pos);
  s.max_context = 128;
  s.vocab_size = 19;
  if (llama) testing::make_llama(s);
  if (moe) testing::add_moe(s, /*expert_width=*/16);
  return s;
}

struct Case {
  const char* attn;
  PosScheme pos;
  bool llama;
  bool moe;
};

// The counter itself: it must see a libtorch tensor's storage and a plain malloc, or a zero
// below would prove nothing.
TEST(DecodeAllocationTest, TheCounterSeesLibtorchAndCAllocations) {
  testing::start_counting_allocations();
  { const torch::Tensor t = torch::empty({1000}); }
  EXPECT_GT(testing::stop_counting_allocations(), 0);
  if (!testing::counts_c_allocations()) GTEST_SKIP() << "sanitizer build: malloc not counted";
  testing::start_counting_allocations();
  void* (*volatile c_malloc)(std::size_t) = std::malloc;  // not elided with the free below
  void* p = c_malloc(64);
  const int64_t counted = testing::stop_counting_allocations();
  std::free(p);
  EXPECT_EQ(counted, 1);
}

TEST(DecodeAllocationTest, WholeModelDecodeStepsAllocateNothingOnceWarm) {
  if (detect_cpu_isa() == CpuIsa::kScalar) GTEST_SKIP() << "no SIMD kernels on this CPU";
  const Case cases[] = {
      {"mha", PosScheme::kRope, false, false},
      {"gqa:2", PosScheme::kRope, true, false},
      {"qk-v", PosScheme::kRope, false, false},
      {"q-gqa:2,knorm", PosScheme::kRope, true, false},
      {"qkv1", PosScheme::kSinusoidal, false, false},
      {"q-mqa", PosScheme::kLearned, false, false},
      {"mla", PosScheme::kRope, true, true},
      {"mla:dc=12,dr=4,dq=10", PosScheme::kRope, false, false},
      {"gva:2,dr=4,qnorm", PosScheme::kRope, true, false},
      {"gva:2,dr=0", PosScheme::kRope, false, false},
      {"linear", PosScheme::kLearned, true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.attn);
    torch::manual_seed(7);
    const ModelShape shape = shape_of(c.pos, c.llama, c.moe);
    nn::TransformerModel model(ModelConfig::make(shape, c.attn, DType::kF32), torch::kFloat32);
    Generator gen(model, DType::kBf16, /*max_tokens_per_seq=*/120, /*max_seqs=*/2, /*threads=*/2);
    const int32_t seqs[2] = {gen.add_sequence(), gen.add_sequence()};
    gen.feed(seqs[0], {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
    gen.feed(seqs[1], {4, 3});
    std::vector<float> logits(static_cast<size_t>(2 * shape.vocab_size));
    int64_t tokens[2] = {5, 6};
    auto step = [&] {
      gen.step(seqs, tokens, 2, logits.data());
      tokens[0] = (tokens[0] + 3) % shape.vocab_size;  // feed something that varies
      tokens[1] = (tokens[1] + 5) % shape.vocab_size;
    };
    step();  // warm-up: kernel workspaces grow to this batch
    step();
    testing::start_counting_allocations();
    for (int i = 0; i < 40; ++i) step();  // crosses page boundaries for both sequences
    EXPECT_EQ(testing::stop_counting_allocations(), 0);
    EXPECT_EQ(gen.length(seqs[0]), 13 + 42);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
  if (!testing::counts_c_allocations()) {
    std::printf("note: sanitizer build, only operator new is counted\n");
  }
}

}  // namespace
}  // namespace kvlab::infer
