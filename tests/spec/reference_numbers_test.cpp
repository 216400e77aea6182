// Every number of DESIGN.md's "Reference numbers from the seeds", recomputed from the spec.
#include <gtest/gtest.h>

#include <cmath>

#include "spec/model_config.h"
#include "spec/presets.h"
#include "spec/test_shapes.h"

namespace kvlab {
namespace {

ModelConfig preset_with(const char* preset, const char* attn, DType dtype = DType::kBf16) {
  return ModelConfig::make(find_preset(preset).shape, attn, dtype);
}

double gb(Exact bytes) { return static_cast<double>(bytes.value()) / 1e9; }

double round_to(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

double saving(const ModelConfig& base, const ModelConfig& other, int64_t tokens = 1000) {
  return 1.0 - static_cast<double>(other.cache_bytes(tokens, 1).value()) /
                   static_cast<double>(base.cache_bytes(tokens, 1).value());
}

// Seed 003 §4.3.3: paper-300m in bf16 at 32k (= 32,000 here) and 128k (128,000) tokens.
TEST(ReferenceNumbersTest, Paper300mCacheBytes) {
  const ModelConfig qkv = preset_with("paper-300m", "mha");
  const ModelConfig shared_kv = preset_with("paper-300m", "q-kv");
  const ModelConfig q_eq_k = preset_with("paper-300m", "qk-v");
  EXPECT_EQ(qkv.cache_bytes(32000, 1).value(), 2'621'440'000);         // 2.62 GB
  EXPECT_EQ(shared_kv.cache_bytes(32000, 1).value(), 1'310'720'000);   // 1.31 GB
  EXPECT_EQ(qkv.cache_bytes(128000, 1).value(), 10'485'760'000);       // 10.49 GB
  EXPECT_EQ(shared_kv.cache_bytes(128000, 1).value(), 5'242'880'000);  // 5.24 GB
  EXPECT_EQ(q_eq_k.cache_bytes(32000, 1), qkv.cache_bytes(32000, 1));  // Q=K≠V saves nothing
  EXPECT_DOUBLE_EQ(round_to(gb(qkv.cache_bytes(32000, 1)), 2), 2.62);
  EXPECT_DOUBLE_EQ(round_to(gb(shared_kv.cache_bytes(32000, 1)), 2), 1.31);
  EXPECT_DOUBLE_EQ(round_to(gb(qkv.cache_bytes(128000, 1)), 2), 10.49);
  EXPECT_DOUBLE_EQ(round_to(gb(shared_kv.cache_bytes(128000, 1)), 2), 5.24);
  // batch 32 at 32k: 83.9 GB → 41.9 GB
  EXPECT_DOUBLE_EQ(round_to(gb(qkv.cache_bytes(32000, 32)), 1), 83.9);
  EXPECT_DOUBLE_EQ(round_to(gb(shared_kv.cache_bytes(32000, 32)), 1), 41.9);
}

// Seed 003 §3.2 / §4.3.3: reductions against QKV at paper-300m (16 heads).
TEST(ReferenceNumbersTest, Paper300mCombinedSharingSavings) {
  const ModelConfig qkv = preset_with("paper-300m", "mha");
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-300m", "gqa:4")), 0.75);
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-300m", "q-gqa:4")), 0.875);
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-300m", "q-mqa")), 1 - 1.0 / 32);  // 96.9%
  EXPECT_DOUBLE_EQ(round_to(100 * saving(qkv, preset_with("paper-300m", "q-mqa")), 1), 96.9);
}

// Seed 003 §4.3.5 at 32,768 tokens: QKV 5.9 GB, MQA 176 MiB, Q-MQA 88 MiB.
TEST(ReferenceNumbersTest, Paper1p2bCacheBytes) {
  const int64_t kMiB = 1 << 20;
  EXPECT_EQ(preset_with("paper-1.2b", "mha").cache_bytes(32768, 1).value(), 5'905'580'032);
  EXPECT_DOUBLE_EQ(round_to(gb(preset_with("paper-1.2b", "mha").cache_bytes(32768, 1)), 1), 5.9);
  EXPECT_EQ(preset_with("paper-1.2b", "mqa").cache_bytes(32768, 1).value(), 176 * kMiB);
  EXPECT_EQ(preset_with("paper-1.2b", "q-mqa").cache_bytes(32768, 1).value(), 88 * kMiB);
  // The paper rounds GQA-8 to "76%" and Q-MQA to "98.5%"; exactly they are 75% and 98.4375%.
  const ModelConfig qkv = preset_with("paper-1.2b", "mha");
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-1.2b", "gqa:8")), 0.75);
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-1.2b", "q-gqa:8")), 0.875);
  EXPECT_DOUBLE_EQ(saving(qkv, preset_with("paper-1.2b", "q-mqa")), 0.984375);
}

// Seed 003 §4.3.5: 1,215 / 1,123 / 1,077 / 1,036 / 1,054 / 1,033 million parameters.
TEST(ReferenceNumbersTest, Paper1p2bParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"mha", 1215}, {"q-kv", 1123},    {"gqa:8", 1077},
      {"mqa", 1036}, {"q-gqa:8", 1054}, {"q-mqa", 1033},
  };
  for (auto [attn, millions] : expected) {
    const int64_t params = preset_with("paper-1.2b", attn).param_count().value();
    EXPECT_EQ(std::llround(static_cast<double>(params) / 1e6), millions) << attn << ": " << params;
  }
  EXPECT_EQ(preset_with("paper-1.2b", "mha").param_count().value(), 1'215'102'976);
}

// Seed 003 Table 6: MACs at sequence length 2048 drop 5.4% for Q=K≠V and Q≠K=V and 10.8%
// for Q=K=V. This holds with the dense 2048×2048 score map and the LM head on every token.
TEST(ReferenceNumbersTest, Paper300mPrefillMacSavings) {
  const auto qkv =
      static_cast<double>(preset_with("paper-300m", "mha").prefill_macs(2048).total.value());
  auto drop = [&](const char* attn) {
    const auto macs =
        static_cast<double>(preset_with("paper-300m", attn).prefill_macs(2048).total.value());
    return round_to(100 * (1 - macs / qkv), 1);
  };
  EXPECT_DOUBLE_EQ(drop("qk-v"), 5.4);
  EXPECT_DOUBLE_EQ(drop("q-kv"), 5.4);
  EXPECT_DOUBLE_EQ(drop("qkv1"), 10.8);
}

// Seed 000: GVA/GQA cache ratio = 1/2 + d_r / (2·G·d_h).
TEST(ReferenceNumbersTest, GvaCacheRatioFormula) {
  for (int64_t heads : {8, 16, 32}) {
    for (int64_t head_dim : {32, 64, 128}) {
      for (int64_t groups : {1, 2, 4, 8}) {
        for (int64_t rope_dim : {8, 16, 24, 64}) {
          const ModelShape s = testing::rope_decoder(heads, head_dim);
          const std::string g = std::to_string(groups);
          const ModelConfig gqa = ModelConfig::make(s, "gqa:" + g, DType::kBf16);
          const ModelConfig gva =
              ModelConfig::make(s, "gva:" + g + ",dr=" + std::to_string(rope_dim), DType::kBf16);
          const double expected =
              0.5 + static_cast<double>(rope_dim) / (2.0 * static_cast<double>(groups * head_dim));
          EXPECT_DOUBLE_EQ(1 - saving(gqa, gva), expected);
        }
      }
    }
  }
}

// Seed 000: 46.9% / 45.3% saved at G·d_h = 256 with d_r 16 / 24 (here 4 groups of 64).
TEST(ReferenceNumbersTest, GvaSavingsOfTheSeed) {
  const ModelShape s = testing::rope_decoder(16, 64);
  const ModelConfig gqa = ModelConfig::make(s, "gqa:4", DType::kBf16);
  EXPECT_DOUBLE_EQ(saving(gqa, ModelConfig::make(s, "gva:4,dr=16", DType::kBf16)), 0.46875);
  EXPECT_DOUBLE_EQ(saving(gqa, ModelConfig::make(s, "gva:4,dr=24", DType::kBf16)), 0.453125);
  EXPECT_DOUBLE_EQ(
      round_to(100 * saving(gqa, ModelConfig::make(s, "gva:4,dr=16", DType::kBf16)), 1), 46.9);
  EXPECT_DOUBLE_EQ(
      round_to(100 * saving(gqa, ModelConfig::make(s, "gva:4,dr=24", DType::kBf16)), 1), 45.3);
}

// Seed 000: ≈ 49% at G 8, d_h 128, d_r 16; MLA (d_c 512 + d_r 64) against that GQA ≈ 72%.
TEST(ReferenceNumbersTest, GvaAndMlaAtProductionWidths) {
  const ModelConfig gqa = preset_with("llama-3-8b", "gqa:8");
  const double gva = saving(gqa, preset_with("llama-3-8b", "gva:8,dr=16"));
  const double mla = saving(gqa, preset_with("llama-3-8b", "mla:dc=512,dr=64"));
  EXPECT_DOUBLE_EQ(gva, 1 - 1040.0 / 2048);
  EXPECT_EQ(std::lround(100 * gva), 49);
  EXPECT_DOUBLE_EQ(mla, 1 - 576.0 / 2048);
  EXPECT_EQ(std::lround(100 * mla), 72);
}

// Grouped-tied attention caches as GVA does: (G·d_h + d_r) per token per layer; at 32k tokens
// in bf16 on Llama-3-8B (32 layers), (8·128 + 64)·2·32·32,768 bytes.
TEST(ReferenceNumbersTest, GtaCachesTheTiedStateAndOneRopeKey) {
  EXPECT_EQ(preset_with("llama-3-8b", "gta:8,dr=64").cache_bytes(32768, 1).value(), 2'281'701'376);
  EXPECT_EQ(preset_with("llama-3-8b", "gta:8").cache_bytes(32768, 1).value(),
            preset_with("llama-3-8b", "gta:8,dr=64").cache_bytes(32768, 1).value());
  EXPECT_EQ(preset_with("llama-3-8b", "gta:8,dr=16").cache_bytes_per_token().value(),
            preset_with("llama-3-8b", "gva:8,dr=16").cache_bytes_per_token().value());
}

// Grouped latent attention caches C·(d_c + d_r) per token per layer: with 2 latent heads of
// 256 + 64 on Llama-3-8B, 640 elements against MLA 512 + 64's 576.
TEST(ReferenceNumbersTest, GlaCachesOneLatentRowPerLatentHead) {
  EXPECT_EQ(preset_with("llama-3-8b", "gla:hc=2").cache_bytes(32768, 1).value(),
            int64_t{2 * (256 + 64)} * 2 * 32 * 32768);
  EXPECT_EQ(preset_with("llama-3-8b", "gla:hc=1,dc=512,dr=64").cache_bytes_per_token().value(),
            preset_with("llama-3-8b", "mla:dc=512,dr=64").cache_bytes_per_token().value());
}

// Published parameter counts of the real models (Hugging Face model cards / configs).
TEST(ReferenceNumbersTest, RealModelParameterCounts) {
  auto params = [](const char* name) {
    const Preset& p = find_preset(name);
    return static_cast<double>(
        ModelConfig::make(p.shape, p.attn, DType::kBf16).param_count().value());
  };
  // doubles hold these integers exactly (< 2^53)
  EXPECT_EQ(params("llama-3-8b"), 8'030'261'248.0);
  EXPECT_EQ(params("llama-3-70b"), 70'553'706'496.0);
  EXPECT_EQ(params("mistral-7b"), 7'241'732'096.0);
  EXPECT_EQ(params("qwen2.5-7b"), 7'615'616'512.0);
  // DeepSeek reports totals rounded: 15.7B (V2-Lite), 236B (V2), 671B (V3, without MTP)
  EXPECT_NEAR(params("deepseek-v2-lite") / 1e9, 15.7, 0.05);
  EXPECT_NEAR(params("deepseek-v2") / 1e9, 236, 0.5);
  EXPECT_NEAR(params("deepseek-v3") / 1e9, 671, 0.5);
}

TEST(ReferenceNumbersTest, EveryPresetBuildsWithItsOwnAttention) {
  for (const Preset& p : presets()) {
    SCOPED_TRACE(p.name);
    const ModelConfig m = ModelConfig::make(p.shape, p.attn, DType::kBf16);
    EXPECT_EQ(m.attn.to_string(), p.attn);  // presets are written canonically
    EXPECT_GT(m.cache_bytes_per_token().value(), 0);
  }
  // MLA presets cache d_c + d_r = 576 scalars per token per layer, as DeepSeek reports.
  EXPECT_EQ(
      ModelConfig::make(find_preset("deepseek-v3").shape, "mla:dc=512,dr=64,dq=1536", DType::kBf16)
          .attn.cache_layout()
          .scalars_per_token(),
      576);
}

}  // namespace
}  // namespace kvlab
