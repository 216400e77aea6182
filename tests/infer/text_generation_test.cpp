// generate_text_tokens: the cached loop generates what the uncached one (a full forward per
// token) does; eos, should_stop and the seed do what they say.
#include "infer/text_generation.h"

#include <gtest/gtest.h>

#include "nn/nn_test_util.h"
#include "spec/spec_error.h"

namespace kvlab::infer {
namespace {

using testing::small_shape;

nn::TransformerModel tiny_model(const char* attn, PosScheme pos = PosScheme::kRope) {
  torch::manual_seed(43);
  return nn::TransformerModel(ModelConfig::make(small_shape(pos), attn, DType::kF32),
                              torch::kFloat32);
}

TEST(TextGenerationTest, CachedGreedyEqualsAFullForwardPerToken) {
  for (const char* attn : {"gqa:2", "gva:2,dr=4", "mla", "linear"}) {
    SCOPED_TRACE(attn);
    // linear attention keeps no RoPE inside its running state
    const PosScheme pos = std::string(attn) == "linear" ? PosScheme::kLearned : PosScheme::kRope;
    const nn::TransformerModel model = tiny_model(attn, pos);
    TextGenerationOptions options;
    options.max_tokens = 9;
    const std::vector<int64_t> prompt = {5, 1, 4, 1, 5};
    const TextGenerationResult cached = generate_text_tokens(model, prompt, options, {});
    options.use_cache = false;
    const TextGenerationResult recomputed = generate_text_tokens(model, prompt, options, {});
    EXPECT_EQ(cached.tokens, recomputed.tokens);
    ASSERT_EQ(cached.tokens.size(), 9u);
    EXPECT_EQ(cached.decode_steps, 8);  // the last token's logits come with the step before it
    EXPECT_EQ(recomputed.decode_steps, 9);
    EXPECT_FALSE(cached.stopped);
  }
}

TEST(TextGenerationTest, EndsAtEosAndWhenAskedToStop) {
  const nn::TransformerModel model = tiny_model("gqa:2");
  TextGenerationOptions options;
  options.max_tokens = 6;
  const std::vector<int64_t> prompt = {2, 7};
  const std::vector<int32_t> all = generate_text_tokens(model, prompt, options, {}).tokens;
  ASSERT_EQ(all.size(), 6u);
  options.eos_id = all[2];
  const TextGenerationResult to_eos = generate_text_tokens(model, prompt, options, {});
  const auto first_eos = std::find(all.begin(), all.end(), all[2]);
  EXPECT_EQ(to_eos.tokens, std::vector<int32_t>(all.begin(), first_eos + 1));  // eos is kept
  options.eos_id.reset();
  int asked = 0;
  const TextGenerationResult stopped =
      generate_text_tokens(model, prompt, options, [&] { return ++asked > 2; });
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(all.begin(), all.begin() + 2));
}

TEST(TextGenerationTest, TheSeedFixesTheSample) {
  const nn::TransformerModel model = tiny_model("gva:2,dr=4");
  TextGenerationOptions options;
  options.max_tokens = 24;
  options.sampling = {1.5, 0, 1.0};
  options.seed = 11;
  const std::vector<int64_t> prompt = {3};
  const auto first = generate_text_tokens(model, prompt, options, {}).tokens;
  EXPECT_EQ(generate_text_tokens(model, prompt, options, {}).tokens, first);
  options.seed = 12;
  EXPECT_NE(generate_text_tokens(model, prompt, options, {}).tokens, first);
}

TEST(TextGenerationTest, RefusesAnEmptyPromptAndBf16ArithmeticOnAnF32Cache) {
  const nn::TransformerModel model = tiny_model("gqa:2");
  TextGenerationOptions options;
  EXPECT_THROW(generate_text_tokens(model, {}, options, {}), SpecError);
  options.attn_precision = "bf16";
  try {
    generate_text_tokens(model, {1, 2}, options, {});
    ADD_FAILURE() << "bf16 arithmetic on an f32 cache ran";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "attn-precision");
  }
}

}  // namespace
}  // namespace kvlab::infer
