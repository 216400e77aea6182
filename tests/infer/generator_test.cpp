// Cached decode == full forward: for every causal variant and cache dtype, the logits of
// token-by-token decoding through the paged cache and the kernels equal the full-sequence
// forward pass's; a ragged batch decodes exactly as each sequence alone.
#include "infer/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/convert.h"
#include "kernels/fast_decoder.h"
#include "nn/nn_test_util.h"
#include "spec/spec_error.h"
#include "thrown_message.h"

namespace kvlab::infer {
namespace {

using testing::max_abs_diff;
using testing::small_shape;

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 2e-5;
    case DType::kF16:
      return 1e-2;
    default:
      return 6e-2;
  }
}

struct Case {
  const char* attn;
  PosScheme pos;
};

const Case kCases[] = {
    {"mha", PosScheme::kRope},           {"gqa:2", PosScheme::kRope},
    {"mqa", PosScheme::kLearned},        {"qk-v", PosScheme::kRope},
    {"q-kv", PosScheme::kLearned},       {"qkv1", PosScheme::kRope},
    {"q-gqa:2,knorm", PosScheme::kRope}, {"q-mqa", PosScheme::kSinusoidal},
    {"mla", PosScheme::kRope},           {"mla:dc=12,dr=4,dq=10", PosScheme::kLearned},
    {"gva:2,dr=4", PosScheme::kRope},    {"gva:2,dr=4,qnorm", PosScheme::kNone},
    {"gva:2,dr=0", PosScheme::kRope},    {"linear", PosScheme::kLearned},
    {"gta:2", PosScheme::kRope},         {"gta:1", PosScheme::kLearned},
    {"gla:hc=2", PosScheme::kRope},      {"gla:hc=4,dc=6", PosScheme::kLearned},
};

// Case c's small f32 model, its weights drawn after torch::manual_seed(seed), holding `context`
// tokens.
nn::TransformerModel seeded_model(const Case& c, uint64_t seed, int64_t context) {
  torch::manual_seed(seed);
  ModelShape shape = small_shape(c.pos);
  shape.max_context = context;
  return nn::TransformerModel(ModelConfig::make(shape, c.attn, DType::kF32), torch::kFloat32);
}

TEST(GeneratorTest, CachedDecodeEqualsTheFullForward) {
  for (DType dtype : {DType::kF32, DType::kBf16, DType::kF16}) {
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(c.attn) + " " + std::string(pos_scheme_name(c.pos)) + " " +
                   std::string(dtype_name(dtype)));
      torch::manual_seed(40);
      const ModelShape shape = small_shape(c.pos);
      nn::TransformerModel model(ModelConfig::make(shape, c.attn, DType::kF32), torch::kFloat32);
      const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 11});
      const torch::Tensor full = model->forward(tokens).detach();  // [1, 11, V]
      Generator gen(model, dtype, 16, 2, 2);
      const int32_t seq = gen.add_sequence();
      std::vector<int64_t> prompt;
      for (int64_t t = 0; t < 4; ++t) prompt.push_back(tokens[0][t].item<int64_t>());
      torch::Tensor logits = gen.feed(seq, prompt);
      EXPECT_LT(max_abs_diff(logits, full[0][3]), tolerance(dtype)) << "prompt";
      // a second batched chunk, appended after what the cache holds
      logits = gen.feed(seq, {tokens[0][4].item<int64_t>(), tokens[0][5].item<int64_t>(),
                              tokens[0][6].item<int64_t>()});
      EXPECT_LT(max_abs_diff(logits, full[0][6]), tolerance(dtype)) << "second chunk";
      for (int64_t t = 7; t < 11; ++t) {
        logits = gen.step({seq}, {tokens[0][t].item<int64_t>()})[0];
        EXPECT_LT(max_abs_diff(logits, full[0][t]), tolerance(dtype)) << "token " << t;
      }
      EXPECT_EQ(gen.length(seq), 11);
    }
  }
}

// A prompt longer than a prefill chunk runs as several steps of kPrefillRows rows (each row
// attending over the cache up to its own token): the logits after each prompt equal the full
// forward's, and so do the steps after them; linear attention's prompt steps token by token.
TEST(GeneratorTest, PromptsLongerThanAChunkEqualTheFullForward) {
  const int64_t first = kPrefillRows + 22, second = kPrefillRows + 12, total = first + second + 3;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.attn);
    nn::TransformerModel model = seeded_model(c, 43, total);
    const ModelShape& shape = model->config().shape;
    const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, total});
    const torch::Tensor full = model->forward(tokens).detach();  // [1, total, V]
    Generator gen(model, DType::kF32, total, 1, 2);
    EXPECT_EQ(gen.decode_model().prefill_rows(),
              std::string(c.attn) == "linear" ? 1 : kPrefillRows);
    const int32_t seq = gen.add_sequence();
    const auto span = [&](int64_t from, int64_t to) {
      std::vector<int64_t> out;
      for (int64_t t = from; t < to; ++t) out.push_back(tokens[0][t].item<int64_t>());
      return out;
    };
    EXPECT_LT(max_abs_diff(gen.feed(seq, span(0, first)), full[0][first - 1]), 2e-5);
    EXPECT_LT(max_abs_diff(gen.feed(seq, span(first, first + second)), full[0][first + second - 1]),
              2e-5);
    for (int64_t t = first + second; t < total; ++t) {
      const torch::Tensor logits = gen.step({seq}, {tokens[0][t].item<int64_t>()})[0];
      EXPECT_LT(max_abs_diff(logits, full[0][t]), 2e-5) << "token " << t;
    }
  }
}

// A serving step's rows: prompt chunks and decode tokens of three sequences in one call
// (DecodeModel::step_rows), sliced where they pass the step's rows, equal the full forward at
// every sampled row; a failure in a later slice leaves every sequence as it was.
TEST(GeneratorTest, MixedStepRowsEqualTheFullForward) {
  const int64_t total = kPrefillRows + 40;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.attn);
    nn::TransformerModel model = seeded_model(c, 47, total);
    const ModelShape& shape = model->config().shape;
    const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {3, total});
    const torch::Tensor full = model->forward(tokens).detach();  // [3, total, V]
    const int64_t V = shape.vocab_size;
    // (sequence, first token, count) per chunk; the last row of each samples
    using Chunks = std::vector<std::array<int64_t, 3>>;
    const auto run = [&](Generator& gen, const Chunks& chunks) {
      std::vector<int32_t> seqs;
      std::vector<int64_t> row_tokens, logit_rows;
      for (const auto& [s, first, count] : chunks) {
        for (int64_t t = first; t < first + count; ++t) {
          seqs.push_back(static_cast<int32_t>(s));
          row_tokens.push_back(tokens[s][t].item<int64_t>());
        }
        logit_rows.push_back(static_cast<int64_t>(seqs.size()) - 1);
      }
      std::vector<float> logits(logit_rows.size() * static_cast<size_t>(V));
      gen.step_rows(seqs.data(), row_tokens.data(), static_cast<int64_t>(seqs.size()),
                    logit_rows.data(), static_cast<int64_t>(logit_rows.size()), logits.data());
      for (size_t k = 0; k < chunks.size(); ++k) {
        const auto& [s, first, count] = chunks[k];
        const torch::Tensor got = torch::from_blob(logits.data() + k * static_cast<size_t>(V), {V});
        EXPECT_LT(max_abs_diff(got, full[s][first + count - 1]), 2e-5)
            << "sequence " << s << " token " << first + count - 1;
      }
    };
    const Chunks prompts = {{0, 0, 20}, {1, 0, kPrefillRows + 22}};  // two slices
    const Chunks mixed = {{0, 20, 1}, {1, kPrefillRows + 22, 10}, {2, 0, 9}};
    const Chunks decode = {{2, 9, 1}, {0, 21, 1}, {1, kPrefillRows + 32, 1}};
    Generator gen(model, DType::kF32, total, 3, 2);
    for (int s = 0; s < 3; ++s) ASSERT_EQ(gen.add_sequence(), s);
    run(gen, prompts);
    run(gen, mixed);
    run(gen, decode);

    // room for the first slice (20 + 108 rows: 2 + 7 pages), not the second (B's 10 pages)
    Generator small(model, DType::kF32, total, 3, 2, std::nullopt, std::nullopt, 10);
    for (int s = 0; s < 3; ++s) ASSERT_EQ(small.add_sequence(), s);
    if (small.decode_model().prefill_rows() > 1) {
      EXPECT_THROW(run(small, prompts), std::exception);
      EXPECT_EQ(small.length(0), 0);
      EXPECT_EQ(small.length(1), 0);
    }
    run(small, {{0, 0, 20}, {2, 0, 9}});  // and then runs as one that never saw the failure
    run(small, {{0, 20, 1}, {2, 9, 1}});

    // refused before any work, naming what is wrong
    const int32_t seqs[2] = {0, 2};
    const int64_t good[2] = {1, 2}, bad_token[2] = {1, shape.vocab_size};
    const int64_t backwards[2] = {1, 0};
    float out[2];
    const auto refusal = [&](auto&& call) {
      const std::string message = thrown_message(call);
      EXPECT_EQ(small.length(0), 21);  // nothing appended
      return message;
    };
    EXPECT_NE(
        refusal([&] { small.step_rows(seqs, good, 2, backwards, 2, out); }).find("logit row 0"),
        std::string::npos);
    EXPECT_NE(
        refusal([&] { small.step_rows(seqs, bad_token, 2, backwards, 0, out); }).find("step rows"),
        std::string::npos);
    EXPECT_NE(refusal([&] { small.step_rows(seqs, good, 0, backwards, 0, out); }).find("no rows"),
              std::string::npos);
  }
}

// Keys ordered by element pairs (two-stream bf16 caches): the same logits as key rows at every
// step, both equal to the full forward; a cache that cannot take pairs is refused naming
// key_order, and the order picked when none is given is fastest_key_order's.
TEST(GeneratorTest, KeysOrderedByPairsDecodeAsKeyRows) {
  for (const char* attn : {"mha", "gqa:2", "mqa", "qk-v"}) {
    SCOPED_TRACE(attn);
    torch::manual_seed(41);
    const ModelShape shape = small_shape(PosScheme::kRope);
    nn::TransformerModel model(ModelConfig::make(shape, attn, DType::kF32), torch::kFloat32);
    const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 11});
    const torch::Tensor full = model->forward(tokens).detach();  // [1, 11, V]
    Generator rows(model, DType::kBf16, 16, 1, 2, std::nullopt, KeyOrder::kRows);
    Generator pairs(model, DType::kBf16, 16, 1, 2, std::nullopt, KeyOrder::kTokenPairs);
    ASSERT_EQ(pairs.cache().layout().key_order, KeyOrder::kTokenPairs);
    ASSERT_EQ(rows.cache().layout().key_order, KeyOrder::kRows);
    const int32_t a = rows.add_sequence(), b = pairs.add_sequence();
    std::vector<int64_t> prompt;
    for (int64_t t = 0; t < 5; ++t) prompt.push_back(tokens[0][t].item<int64_t>());
    EXPECT_LT(max_abs_diff(rows.feed(a, prompt), pairs.feed(b, prompt)), 1e-5) << "prompt";
    for (int64_t t = 5; t < 11; ++t) {
      const torch::Tensor from_rows = rows.step({a}, {tokens[0][t].item<int64_t>()})[0];
      const torch::Tensor from_pairs = pairs.step({b}, {tokens[0][t].item<int64_t>()})[0];
      EXPECT_LT(max_abs_diff(from_pairs, from_rows), 1e-5) << "token " << t;
      EXPECT_LT(max_abs_diff(from_pairs, full[0][t]), tolerance(DType::kBf16)) << "token " << t;
    }
    const Generator picked(model, DType::kBf16, 16, 1, 1);
    EXPECT_EQ(picked.cache().layout().key_order, fastest_key_order(picked.cache().layout()));
  }
  torch::manual_seed(41);
  nn::TransformerModel gva(
      ModelConfig::make(small_shape(PosScheme::kRope), "gva:2,dr=4", DType::kF32), torch::kFloat32);
  try {
    Generator refused(gva, DType::kBf16, 16, 1, 1, std::nullopt, KeyOrder::kTokenPairs);
    ADD_FAILURE() << "a one-stream cache took key pairs";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "key_order") << e.what();
  }
  EXPECT_EQ(Generator(gva, DType::kBf16, 16, 1, 1).cache().layout().key_order, KeyOrder::kRows);
}

// q8_0 / q4_0 / fp8 caches: decoding token by token equals the forward over the same quantized
// rows — a prompt's prefill attends over the rows it wrote to the cache, dequantized — at every
// position; and the quantization is really applied (q4_0 moves the logits from the unquantized
// forward's by over 20 times that tolerance).
TEST(GeneratorTest, QuantizedCacheDecodeEqualsTheForwardOverTheSameRows) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kFp8}) {
    for (const Case& c : kCases) {
      if (std::string(c.attn) == "linear") continue;  // a recurrent state, no cached rows
      SCOPED_TRACE(std::string(c.attn) + " " + std::string(dtype_name(dtype)));
      torch::manual_seed(42);
      const ModelShape shape = small_shape(c.pos);
      nn::TransformerModel model(ModelConfig::make(shape, c.attn, DType::kF32), torch::kFloat32);
      const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 9});
      const torch::Tensor full = model->forward(tokens).detach();  // [1, 9, V], no quantization
      Generator stepped(model, dtype, 16, 1, 2), prefilled(model, dtype, 16, 1, 1);
      const int32_t seq = stepped.add_sequence();
      double worst_vs_unquantized = 0;
      for (int64_t t = 0; t < 9; ++t) {
        const torch::Tensor logits = stepped.step({seq}, {tokens[0][t].item<int64_t>()})[0];
        if (t == 0) continue;  // a one-token prompt is a step, not a prefill
        std::vector<int64_t> prefix;
        for (int64_t i = 0; i <= t; ++i) prefix.push_back(tokens[0][i].item<int64_t>());
        const int32_t fresh = prefilled.add_sequence();
        const torch::Tensor forward = prefilled.feed(fresh, prefix);
        prefilled.free_sequence(fresh);
        EXPECT_LT(max_abs_diff(logits, forward), 1e-4) << "token " << t;
        worst_vs_unquantized = std::max(worst_vs_unquantized, max_abs_diff(logits, full[0][t]));
      }
      if (dtype == DType::kQ4_0) {  // measured 5.3e-3 … 1.3e-2 on these random models
        EXPECT_GT(worst_vs_unquantized, 20 * 1e-4);
      }
    }
  }
}

// The raw decode step on the other block forms: RMSNorm, SwiGLU, no biases, an untied LM head,
// and a DeepSeek mixture of experts (routed top-2 + a shared expert) after one dense layer.
TEST(GeneratorTest, DecodeStepEqualsTheFullForwardOnLlamaAndMoeBlocks) {
  ModelShape shape = small_shape(PosScheme::kRope);
  testing::make_llama(shape);
  for (bool moe : {false, true}) {
    if (moe) testing::add_moe(shape, /*expert_width=*/8);
    for (const char* attn : {"mha", "gqa:2", "q-gqa:2,knorm", "mla:dc=12,dr=4,dq=10",
                             "gva:2,dr=4,qnorm", "gva:2,dr=0", "gta:2", "gla:hc=2"}) {
      SCOPED_TRACE(std::string(attn) + (moe ? " moe" : " dense"));
      torch::manual_seed(42);
      nn::TransformerModel model(ModelConfig::make(shape, attn, DType::kF32), torch::kFloat32);
      const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 9});
      const torch::Tensor full = model->forward(tokens).detach();  // [1, 9, V]
      Generator gen(model, DType::kF32, 16, 1, 2);
      const int32_t seq = gen.add_sequence();
      for (int64_t t = 0; t < 9; ++t) {
        const torch::Tensor logits = gen.step({seq}, {tokens[0][t].item<int64_t>()})[0];
        EXPECT_LT(max_abs_diff(logits, full[0][t]), tolerance(DType::kF32)) << "token " << t;
      }
    }
  }
}

// GPT-2's tanh GELU ("gelu_new") in the decode runtime against the full forward. The weights
// are scaled up so that the exact and the tanh GELU give logits further apart than the
// tolerance: a runtime that ignored the kind would fail. Scaled weights scale the f32 rounding of
// the sums as well, and how much of it shows depends on their order (on AVX2, f32 panels sum each
// output in one chain and measured 2.4e-5 from the forward, the row kernels' eight lanes under
// 2e-5), so the step is held to twice the f32 tolerance, which the two GELUs are still over 20
// times apart from.
TEST(GeneratorTest, DecodeStepEqualsTheFullForwardWithTanhGelu) {
  ModelShape shape = small_shape(PosScheme::kLearned);
  shape.mlp_kind = MlpKind::kGeluTanh;
  torch::manual_seed(43);
  nn::TransformerModel model(ModelConfig::make(shape, "mha", DType::kF32), torch::kFloat32);
  ModelShape exact_shape = shape;
  exact_shape.mlp_kind = MlpKind::kGelu;
  nn::TransformerModel exact(ModelConfig::make(exact_shape, "mha", DType::kF32), torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) p.value().mul_(3);
    const auto source = model->named_parameters();
    for (auto& p : exact->named_parameters()) p.value().copy_(source[p.key()]);
  }
  const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 9});
  const torch::Tensor full = model->forward(tokens).detach();  // [1, 9, V]
  const double step_tolerance = 2 * tolerance(DType::kF32);
  ASSERT_GT(max_abs_diff(full, exact->forward(tokens).detach()), 20 * step_tolerance);
  Generator gen(model, DType::kF32, 16, 1, 2);
  const int32_t seq = gen.add_sequence();
  for (int64_t t = 0; t < 9; ++t) {
    const torch::Tensor logits = gen.step({seq}, {tokens[0][t].item<int64_t>()})[0];
    EXPECT_LT(max_abs_diff(logits, full[0][t]), step_tolerance) << "token " << t;
  }
}

// RoPE scaling (stretched frequencies, the cos/sin factor, DeepSeek's softmax factor), Qwen3's
// per-head q/k norms and DeepSeek-V2/V3 routers in the decode runtime (and the kernels that
// rotate keys on read) against the full forward.
TEST(GeneratorTest, DecodeStepEqualsTheFullForwardWithRopeScalingQkNormsAndRouters) {
  RopeScaling linear, llama3, yarn, deepseek_yarn;
  linear.kind = RopeScalingKind::kLinear;
  linear.factor = 2;
  llama3.kind = RopeScalingKind::kLlama3;
  llama3.factor = 8;
  llama3.original_context = 8;
  yarn.kind = RopeScalingKind::kYarn;
  yarn.factor = 4;
  yarn.original_context = 8;
  yarn.attention_factor = 1.2;
  deepseek_yarn = yarn;
  deepseek_yarn.attention_factor = 1.0;
  deepseek_yarn.score_mscale = 0.9;
  MoeShape dense, v2_groups, v3;
  {
    ModelShape s;
    testing::add_moe(s, /*expert_width=*/8);
    v2_groups = s.moe;  // softmax, best two of the best group, renormalised
    v2_groups.n_expert_groups = 2;
    v2_groups.normalize_top_k = true;
    v3 = s.moe;  // sigmoid + correction bias, groups by their best two, renormalised, scaled
    v3.scoring = MoeScoring::kSigmoid;
    v3.score_correction = true;
    v3.group_score = MoeGroupScore::kTopTwoSum;
    v3.n_expert_groups = 2;
    v3.normalize_top_k = true;
    v3.routed_scale = 2.5;
  }
  struct Variant {
    const char* attn;
    RopeScaling scaling;
    MoeShape moe;
  };
  const Variant variants[] = {
      {"gqa:2,qknorm", linear, dense},
      {"gqa:2,qknorm", llama3, v3},
      {"mha", yarn, v2_groups},
      {"mla:dc=12,dr=4,dq=10", deepseek_yarn, v3},
      {"mla:dc=12,dr=4", llama3, v2_groups},
      {"mla:dc=12,dr=4,plainlatent", linear, dense},
      {"q-gqa:2,knorm", yarn, dense},
      {"gva:2,dr=0", yarn, dense},
      {"gla:hc=2", deepseek_yarn, dense},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(std::string(v.attn) + " " + std::string(rope_scaling_kind_name(v.scaling.kind)) +
                 (v.moe.enabled() ? " moe " + std::string(moe_scoring_name(v.moe.scoring)) : ""));
    ModelShape shape = small_shape(PosScheme::kRope);
    testing::make_llama(shape);
    shape.rope_scaling = v.scaling;
    shape.moe = v.moe;
    torch::manual_seed(43);
    nn::TransformerModel model(ModelConfig::make(shape, v.attn, DType::kF32), torch::kFloat32);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters()) {
        // norms and the router's correction bias away from their initial 1 and 0
        if (p.key().find("norm") != std::string::npos ||
            p.key().find("e_score_correction_bias") != std::string::npos) {
          p.value().uniform_(0.5, 1.5);
        }
      }
    }
    const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {1, 12});
    const torch::Tensor full = model->forward(tokens).detach();  // [1, 12, V]
    Generator gen(model, DType::kF32, 16, 1, 2);
    const int32_t seq = gen.add_sequence();
    for (int64_t t = 0; t < 12; ++t) {
      const torch::Tensor logits = gen.step({seq}, {tokens[0][t].item<int64_t>()})[0];
      EXPECT_LT(max_abs_diff(logits, full[0][t]), tolerance(DType::kF32)) << "token " << t;
    }
  }
}

// Three sequences at three positions in one step, then again with the rows in another order (a
// row's RoPE cos/sin kept from the last step belong to another position now).
TEST(GeneratorTest, RaggedBatchEqualsEachSequenceAlone) {
  torch::manual_seed(41);
  const ModelShape shape = small_shape(PosScheme::kRope);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {9, 8}, {4, 4, 4, 4}};
  for (const char* attn : {"gqa:2", "gva:2,dr=4", "gva:2,dr=0", "mla", "gla:hc=2"}) {
    SCOPED_TRACE(attn);
    nn::TransformerModel model(ModelConfig::make(shape, attn, DType::kF32), torch::kFloat32);
    Generator batch(model, DType::kF32, 16, 3, 2);
    std::vector<int32_t> seqs;
    for (const std::vector<int64_t>& prompt : prompts) {
      seqs.push_back(batch.add_sequence());
      batch.feed(seqs.back(), prompt);
    }
    const torch::Tensor first = batch.step(seqs, {3, 3, 3});                          // [3, V]
    const torch::Tensor second = batch.step({seqs[2], seqs[0], seqs[1]}, {5, 6, 7});  // [3, V]
    const int64_t second_row[3] = {1, 2, 0};  // sequence i's row in the second step
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE(i);
      Generator alone(model, DType::kF32, 16, 1, 1);
      const int32_t x = alone.add_sequence();
      alone.feed(x, prompts[i]);
      EXPECT_LT(max_abs_diff(first[static_cast<int64_t>(i)], alone.step({x}, {3})[0]), 1e-5);
      const int64_t next = 5 + static_cast<int64_t>((i + 1) % 3);
      EXPECT_LT(max_abs_diff(second[second_row[i]], alone.step({x}, {next})[0]), 1e-5);
    }
  }
}

// A batch wide enough (128 rows of d 256) that the step's norms, residual adds and activation, and
// each family's per-sequence work (RoPE, q/k norms, cache writes), go on the pool, a contiguous
// share of rows a thread: rows from both shares, at three positions, equal their sequences decoded
// alone — for SwiGLU with RMSNorm and GELU with LayerNorm, and for each family's step.
TEST(GeneratorTest, WideBatchOnThePoolEqualsEachSequenceAlone) {
  torch::manual_seed(43);
  struct Variant {
    bool llama;
    const char* attn;
  };
  for (const Variant& v :
       {Variant{true, "gqa:2,qknorm"}, Variant{false, "gqa:2"}, Variant{true, "q-gqa:2,knorm"},
        Variant{true, "q-kv"}, Variant{true, "qk-v"}, Variant{true, "qkv1"},
        Variant{true, "gva:2,dr=16"}, Variant{true, "gva:2,dr=0"}, Variant{true, "gta:2"},
        Variant{true, "mla:dc=32,dr=16,dq=48"}, Variant{true, "gla:hc=2"}}) {
    SCOPED_TRACE(std::string(v.attn) + (v.llama ? " swiglu, rmsnorm" : " gelu, layernorm"));
    ModelShape shape = small_shape(PosScheme::kRope);
    if (v.llama) testing::make_llama(shape);
    shape.d_model = 256;
    shape.head_dim = 64;
    shape.mlp_width = 384;
    nn::TransformerModel model(ModelConfig::make(shape, v.attn, DType::kF32), torch::kFloat32);
    constexpr int64_t kRows = 128;  // 128 × 256 = 32 k elements: on the pool
    Generator batch(model, DType::kF32, 16, kRows, 2);
    std::vector<int32_t> seqs;
    std::vector<int64_t> next;
    const auto prompt_of = [](int64_t r) {  // 1–3 tokens: the rows at three positions
      return std::vector<int64_t>(static_cast<size_t>(1 + r % 3), r % 11);
    };
    for (int64_t r = 0; r < kRows; ++r) {
      seqs.push_back(batch.add_sequence());
      batch.feed(seqs.back(), prompt_of(r));
      next.push_back((r * 7) % 11);
    }
    const torch::Tensor stepped = batch.step(seqs, next);  // [128, V]
    for (int64_t r : {0, 1, 2, 63, 64, 65, 126, 127}) {
      SCOPED_TRACE(r);
      Generator alone(model, DType::kF32, 16, 1, 1);
      const int32_t x = alone.add_sequence();
      alone.feed(x, prompt_of(r));
      EXPECT_LT(max_abs_diff(stepped[r], alone.step({x}, {next[static_cast<size_t>(r)]})[0]), 1e-5);
    }
  }
}

// q8_0 and q4_0 weights: a batch of 16 (the int8 tiles' products on AMX int8 CPUs, a block of 16
// rows of x; elsewhere the VNNI or AVX2 kernels' batches) decodes as each sequence alone (one row
// of x: the matrix-vector kernels). Both round x to q8_0 alike, so they differ by the order of f32
// sums only. (From quant_expand_min_rows rows the weights are expanded to bf16: the next test.)
TEST(GeneratorTest, QuantWeightsBatchEqualsEachSequenceAlone) {
  torch::manual_seed(47);
  ModelShape shape = small_shape(PosScheme::kRope);
  testing::make_llama(shape);
  nn::TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kF32), torch::kFloat32);
  constexpr int64_t kRows = 16;
  for (DType weights : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(weights));
    Generator batch(model, DType::kF32, 16, kRows, 2, std::nullopt, std::nullopt, 0, weights);
    std::vector<int32_t> seqs;
    std::vector<int64_t> next;
    const auto prompt_of = [](int64_t r) { return std::vector<int64_t>{r % 7, (r / 7) % 7, 3}; };
    for (int64_t r = 0; r < kRows; ++r) {
      seqs.push_back(batch.add_sequence());
      batch.feed(seqs.back(), prompt_of(r));
      next.push_back((r * 5) % 7);
    }
    const torch::Tensor stepped = batch.step(seqs, next);  // [20, V]
    ASSERT_FALSE(torch::isnan(stepped).any().item<bool>());
    for (int64_t r : {0, 7, 15}) {
      SCOPED_TRACE(r);
      Generator alone(model, DType::kF32, 16, 1, 1, std::nullopt, std::nullopt, 0, weights);
      const int32_t x = alone.add_sequence();
      alone.feed(x, prompt_of(r));
      EXPECT_LT(max_abs_diff(stepped[r], alone.step({x}, {next[static_cast<size_t>(r)]})[0]), 1e-4);
    }
  }
}

// From quant_expand_min_rows rows (AMX with AVX-512 BF16) q8_0 and q4_0 weights are expanded to
// bf16(q · d) and multiplied as bf16 weights are: a batch one past the larger of the two (blocks of
// 16 rows of x, the last padded) steps exactly as the same batch with bf16 weights holding those
// values (each
// Linear's weight quantized, read back by load_rows and rounded by f32_to_bf16 here), which run
// the same tiles. Where no such CPU is, skipped (the test above covers every batch there).
TEST(GeneratorTest, ExpandedQuantWeightsStepAsBf16WeightsOfTheirValues) {
  if (quant_expand_min_rows(DType::kQ8_0) == 0) {
    GTEST_SKIP() << "q8_0 / q4_0 weights are expanded to bf16 only with AMX and AVX-512 BF16";
  }
  const int64_t rows =
      std::max(quant_expand_min_rows(DType::kQ8_0), quant_expand_min_rows(DType::kQ4_0)) + 1;
  ModelShape shape = small_shape(PosScheme::kRope);
  testing::make_llama(shape);
  for (DType weights : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(dtype_name(weights));
    torch::manual_seed(53);
    nn::TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kF32), torch::kFloat32);
    torch::manual_seed(53);
    nn::TransformerModel rounded(ModelConfig::make(shape, "gqa:2", DType::kF32), torch::kFloat32);
    {
      torch::NoGradGuard no_grad;
      int64_t linears = 0;
      for (const auto& module : rounded->modules(/*include_self=*/false)) {
        auto* linear = module->as<nn::LinearImpl>();
        if (linear == nullptr) continue;
        const torch::Tensor w = linear->weight.detach().contiguous();  // [out, in]
        const int64_t out = w.size(0), in = w.size(1);
        std::vector<std::byte> packed(static_cast<size_t>(out * row_bytes(weights, in)));
        store_rows(w.data_ptr<float>(), out, in, weights, packed.data());
        std::vector<float> values(static_cast<size_t>(out * in));
        load_rows(packed.data(), out, in, weights, values.data());
        for (float& v : values) v = bf16_to_f32(f32_to_bf16(v));
        linear->weight.copy_(torch::from_blob(values.data(), {out, in}).clone());
        ++linears;
      }
      ASSERT_GT(linears, 0);
    }
    Generator quant(model, DType::kF32, 16, rows, 2, std::nullopt, std::nullopt, 0, weights);
    Generator bf16(rounded, DType::kF32, 16, rows, 2, std::nullopt, std::nullopt, 0, DType::kBf16);
    // every token through the decode step, one step a token
    std::vector<int32_t> quant_seqs, bf16_seqs;
    for (int64_t r = 0; r < rows; ++r) {
      quant_seqs.push_back(quant.add_sequence());
      bf16_seqs.push_back(bf16.add_sequence());
    }
    torch::Tensor a, b;
    std::vector<int64_t> next(static_cast<size_t>(rows));
    for (int64_t t = 0; t < 3; ++t) {
      SCOPED_TRACE(t);
      for (int64_t r = 0; r < rows; ++r) next[static_cast<size_t>(r)] = (r * 5 + t * 3) % 7;
      a = quant.step(quant_seqs, next);
      b = bf16.step(bf16_seqs, next);
      ASSERT_FALSE(torch::isnan(a).any().item<bool>());
      EXPECT_EQ(max_abs_diff(a, b), 0.0);
    }
    // and not the int8 kernels' products: x rounded to bf16, not to q8_0 blocks
    Generator alone(model, DType::kF32, 16, 1, 1, std::nullopt, std::nullopt, 0, weights);
    const int32_t x = alone.add_sequence();
    torch::Tensor single;
    for (int64_t t = 0; t < 3; ++t) single = alone.step({x}, {(t * 3) % 7});
    EXPECT_GT(max_abs_diff(a[0], single[0]), 1e-4);
  }
}

TEST(GeneratorTest, SamplingRespectsTemperatureTopKAndTopP) {
  const torch::Tensor logits = torch::tensor({0.0, 3.0, 1.0, 2.9});
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample(logits, {}, rng), 1);  // greedy
  for (int i = 0; i < 200; ++i) {
    const int64_t k2 = sample(logits, {1.0, 2, 1.0}, rng);
    EXPECT_TRUE(k2 == 1 || k2 == 3);                   // top-2
    EXPECT_EQ(sample(logits, {1.0, 0, 0.3}, rng), 1);  // the top token alone holds > 30%
  }
  std::mt19937_64 a(7), b(7);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample(logits, {1.5, 0, 1.0}, a), sample(logits, {1.5, 0, 1.0}, b));
}

// Below kGreedyBelowTemperature sampling is greedy (logits ÷ 1e-320 would be infinite and the
// softmax NaN); at the line itself it samples softmax(l / T): two logits T·ln 3 apart are drawn
// 3 : 1.
TEST(GeneratorTest, TinyTemperaturesAreGreedyFromTheLineDown) {
  const double t = kGreedyBelowTemperature;
  const torch::Tensor logits =
      torch::tensor({0.0, t * std::log(3.0), -1.0}, torch::TensorOptions().dtype(torch::kFloat64));
  std::mt19937_64 rng(3);
  for (double below : {1e-320, 1e-300, 1e-9, 0.999 * t}) {
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sample(logits, {below, 0, 1.0}, rng), 1) << below;
  }
  int ones = 0;
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) {
    const int64_t token = sample(logits, {t, 0, 1.0}, rng);
    ASSERT_TRUE(token == 0 || token == 1) << token;
    ones += token == 1 ? 1 : 0;
  }
  // 3/4 of the draws, within 5 standard deviations (sqrt(4000 · 3/16) ≈ 27)
  EXPECT_NEAR(ones, 3000, 140);
}

TEST(GeneratorTest, RefusesWhatCannotDecode) {
  nn::TransformerModel encoder(
      ModelConfig::make(small_shape(PosScheme::kLearned, ModelKind::kEncoder), "mha", DType::kF32),
      torch::kFloat32);
  EXPECT_THROW(Generator(encoder, DType::kBf16, 16, 1, 1), std::invalid_argument);
  // bad tokens and batches are refused, naming the problem, and leave every sequence as it was
  nn::TransformerModel model(
      ModelConfig::make(small_shape(PosScheme::kLearned), "gqa:2", DType::kF32), torch::kFloat32);
  Generator gen(model, DType::kBf16, 16, 2, 1);
  const int32_t a = gen.add_sequence(), b = gen.add_sequence();
  gen.feed(a, {1, 2});
  EXPECT_NE(thrown_message([&] {
              gen.feed(a, {3, 11});
            }).find("token 11 is outside the vocabulary of 11"),
            std::string::npos);
  EXPECT_NE(thrown_message([&] { gen.step({a}, {-1}); }).find("token -1"), std::string::npos);
  EXPECT_NE(thrown_message([&] {
              gen.step({a, a}, {1, 2});
            }).find("appears twice"),
            std::string::npos);
  EXPECT_NE(thrown_message([&] {
              gen.step({a, b, a}, {1, 2, 3});
            }).find("batch of 3"),
            std::string::npos);
  // a prompt is checked whole before any work: a bad token in its second chunk, no tokens
  const int64_t free_before = gen.cache().free_pages();
  std::vector<int64_t> late_bad(static_cast<size_t>(kPrefillRows + 3), 1);
  late_bad.back() = 11;
  std::vector<float> logits(11);
  EXPECT_NE(thrown_message([&] {
              gen.decode_model().prefill(b, late_bad.data(), static_cast<int64_t>(late_bad.size()),
                                         logits.data());
            }).find("prefill: token 11 is outside the vocabulary of 11"),
            std::string::npos);
  EXPECT_EQ(gen.cache().free_pages(), free_before);
  EXPECT_NE(thrown_message([&] { gen.feed(a, {}); }).find("prefill: no tokens"), std::string::npos);
  EXPECT_EQ(gen.length(a), 2);
  EXPECT_EQ(gen.length(b), 0);
  // the learned position table holds 16 positions
  for (int64_t t = 2; t < 16; ++t) gen.step({a}, {1});
  EXPECT_NE(thrown_message([&] { gen.step({a}, {1}); }).find("exceeds the learned table of 16"),
            std::string::npos);
  EXPECT_EQ(gen.length(a), 16);
  // a prompt past the table fails whole (the cache has room): nothing of it stays
  Generator roomy(model, DType::kBf16, /*max_tokens_per_seq=*/32, 1, 1);
  const int32_t r = roomy.add_sequence();
  EXPECT_NE(thrown_message([&] {
              roomy.feed(r, std::vector<int64_t>(17, 1));
            }).find("exceed the learned table of 16"),
            std::string::npos);
  EXPECT_EQ(roomy.length(r), 0);

  // a full cache: the sequence that fitted is rolled back when a later one of the batch fails
  nn::TransformerModel rope(ModelConfig::make(small_shape(PosScheme::kRope), "gqa:2", DType::kF32),
                            torch::kFloat32);
  Generator full(rope, DType::kBf16, /*max_tokens_per_seq=*/16, /*max_seqs=*/2, 1);
  const int32_t x = full.add_sequence(), y = full.add_sequence();
  full.feed(x, std::vector<int64_t>(17, 1));  // both pages of the pool
  EXPECT_NE(thrown_message([&] {
              full.step({x, y}, {1, 1});
            }).find("cache full"),
            std::string::npos);
  EXPECT_EQ(full.length(x), 17);
  EXPECT_EQ(full.length(y), 0);

  // a prompt whose second chunk finds the cache full: nothing of it stays, its pages go back
  const int64_t pages = (kPrefillRows + 32) / Generator::kPageSize;
  Generator tight(rope, DType::kBf16, /*max_tokens_per_seq=*/4 * kPrefillRows, 1, 1, std::nullopt,
                  std::nullopt, /*max_pages=*/pages);
  const int32_t z = tight.add_sequence();
  tight.feed(z, {1, 2});
  EXPECT_NE(thrown_message([&] {
              tight.feed(z, std::vector<int64_t>(static_cast<size_t>(kPrefillRows + 40), 3));
            }).find("cache full"),
            std::string::npos);
  EXPECT_EQ(tight.length(z), 2);
  EXPECT_EQ(tight.cache().free_pages(), pages - 1);
  // and the sequence decodes on as if the prompt had never come
  Generator roomier(rope, DType::kBf16, 4 * kPrefillRows, 1, 1);
  const int32_t w = roomier.add_sequence();
  const torch::Tensor expected = roomier.feed(w, {1, 2, 5});
  EXPECT_EQ(max_abs_diff(tight.feed(z, {5}), expected), 0.0);
}

}  // namespace
}  // namespace kvlab::infer
