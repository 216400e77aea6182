// Hand-counted parameters, MACs and cache bytes on a model small enough to check on paper.
#include <gtest/gtest.h>

#include "spec/model_config.h"
#include "spec/spec_error.h"
#include "spec/test_shapes.h"

namespace kvlab {
namespace {

using testing::rope_decoder;
using testing::tiny_encoder;
using testing::tiny_gpt;

int64_t attn_params(const char* text, const ModelShape& model = tiny_gpt()) {
  return AttentionSpec::parse(text, model, DType::kF32).param_count().value();
}

// tiny_gpt: D 8, H 2, d_h 4 (H·d_h = 8), biases everywhere, LayerNorm.
// A D→8 projection with bias: 8·8 + 8 = 72. A D→4 projection: 8·4 + 4 = 36.
TEST(AccountingTest, AttentionParametersByHand) {
  EXPECT_EQ(attn_params("mha"), 4 * 72);
  EXPECT_EQ(attn_params("gqa:2"), 72 + 72 + 72 + 72);  // G = H
  EXPECT_EQ(attn_params("gqa:1"), 72 + 2 * 36 + 72);
  EXPECT_EQ(attn_params("mqa"), 72 + 2 * 36 + 72);
  EXPECT_EQ(attn_params("qk-v"), 3 * 72);
  EXPECT_EQ(attn_params("q-kv"), 3 * 72);
  EXPECT_EQ(attn_params("qkv1"), 2 * 72);
  EXPECT_EQ(attn_params("q-gqa:1"), 72 + 36 + 72);
  EXPECT_EQ(attn_params("q-mqa"), 72 + 36 + 72);
  EXPECT_EQ(attn_params("linear"), 2 * 72);
  // '+': 1×1 conv of m weights and a bias per head
  EXPECT_EQ(attn_params("qk-v+:m=8", tiny_encoder()), 3 * 72 + 2 * (8 + 1));
  EXPECT_EQ(attn_params("qkv1+:m=8", tiny_encoder()), 2 * 72 + 2 * (8 + 1));
  // mla defaults d_c 16, d_r 2, d_n = d_v = 4: q 8→12 (108), kv_a 8→18 (162), LayerNorm on
  // c (32), up 16→16 (272), out 8→8 (72)
  EXPECT_EQ(attn_params("mla"), 108 + 162 + 32 + 272 + 72);
  // low-rank query d_q 6: 8→6 (54), LayerNorm (12), 6→12 (84)
  EXPECT_EQ(attn_params("mla:dc=16,dr=2,dq=6"), 54 + 12 + 84 + 162 + 32 + 272 + 72);
  // gva:1,dr=2: q 8→12 (108), v 8→4 (36), r 8→2 (18), M_h 2·4·4 (32), out (72)
  EXPECT_EQ(attn_params("gva:1,dr=2"), 108 + 36 + 18 + 32 + 72);
  EXPECT_EQ(attn_params("gva:1,dr=2,qnorm"), 108 + 36 + 18 + 32 + 4 + 72);
  // dr = 0: q 8→8 (72), no rope projection
  EXPECT_EQ(attn_params("gva:1,dr=0"), 72 + 36 + 32 + 72);
  // gta:1 (d_r = d_h/2 = 2, d_n = 2): q 8→8 (72), tied state 8→4 (36), r 8→2 (18), no M_h,
  // out (72)
  EXPECT_EQ(attn_params("gta:1"), 72 + 36 + 18 + 72);
  EXPECT_EQ(attn_params("gta:2,dr=2"), 72 + 72 + 18 + 72);
  // gla:hc=2 (d_c = 2·d_h = 8, d_r = 2, d_n = d_v = 4): q 8→12 (108), kv_a 8→2·10 (180),
  // one LayerNorm over d_c (16), up 8→16 (144), out (72)
  EXPECT_EQ(attn_params("gla:hc=2"), 108 + 180 + 16 + 144 + 72);
}

TEST(AccountingTest, BiasKindsAndKnorm) {
  ModelShape s = rope_decoder(2, 4);  // D 8, no biases
  EXPECT_EQ(attn_params("mha", s), 4 * 64);
  s.bias = BiasKind::kQkv;  // Qwen2: q, k, v only
  EXPECT_EQ(attn_params("mha", s), 4 * 64 + 3 * 8);
  EXPECT_EQ(attn_params("q-kv:knorm", s), 3 * 64 + 2 * 8 + 4);  // + RMSNorm weights on C rows
}

TEST(AccountingTest, ModelParametersByHand) {
  const ModelConfig m = ModelConfig::make(tiny_gpt(), "mha", DType::kF32);
  // embedding 10·8, positions 6·8, per layer: attention 288 + MLP (8·16+16 + 16·8+8 = 280)
  // + 2 LayerNorms (32); final LayerNorm 16; tied head
  EXPECT_EQ(m.embedding_param_count().value(), 80 + 48);
  EXPECT_EQ(m.param_count().value(), 80 + 48 + 2 * (288 + 280 + 32) + 16);
  ModelShape untied = tiny_gpt();
  untied.tied_embeddings = false;
  EXPECT_EQ(ModelConfig::make(untied, "mha", DType::kF32).param_count().value(),
            80 + 48 + 2 * (288 + 280 + 32) + 16 + 80);
  ModelShape swiglu = rope_decoder(2, 4);  // D 8, MLP 32, RMSNorm, no bias, vocab 1000
  swiglu.n_layers = 1;
  EXPECT_EQ(ModelConfig::make(swiglu, "mha", DType::kF32).param_count().value(),
            1000 * 8 + (256 + 3 * 8 * 32 + 2 * 8) + 8 + 1000 * 8);
}

TEST(AccountingTest, MoeCountsEveryExpertButRunsOnlyTheActiveOnes) {
  ModelShape s = rope_decoder(2, 4);  // D 8, SwiGLU, no bias
  s.n_layers = 3;
  s.moe = MoeShape{/*routed=*/4, /*shared=*/1, /*per_token=*/2, /*expert_mlp_width=*/6,
                   /*dense_layers=*/1};
  const ModelConfig m = ModelConfig::make(s, "mha", DType::kF32);
  const int64_t expert = 3 * 8 * 6;
  EXPECT_EQ(m.mlp_param_count(0).value(), 3 * 8 * 32);          // dense layer
  EXPECT_EQ(m.mlp_param_count(1).value(), 5 * expert + 4 * 8);  // experts + router
  const int64_t decode_mlp = 3 * 8 * 32 + 2 * ((2 + 1) * expert + 4 * 8);
  const ModelMacs decode = m.decode_macs(1);
  EXPECT_EQ(decode.total.value() - decode.attention.value() - 8 * 1000, decode_mlp);
}

TEST(AccountingTest, PrefillAndDecodeMacsByHand) {
  const ModelConfig m = ModelConfig::make(tiny_gpt(), "mha", DType::kF32);
  // per token projections 4·64 = 256; n = 3: dense 3×3 scores and sums, 2 heads, 4 + 4
  const AttnMacs layer = m.attn.prefill_macs(3);
  EXPECT_EQ(layer.projections.value(), 3 * 256);
  EXPECT_EQ(layer.mixing.value(), 9 * 2 * 8);
  const ModelMacs prefill = m.prefill_macs(3);
  EXPECT_EQ(prefill.attention.value(), 2 * (768 + 144));
  EXPECT_EQ(prefill.total.value(), 2 * (768 + 144) + 2 * 3 * 256 + 3 * 8 * 10);
  // decode at T = 5: 256 + 5·2·8
  const ModelMacs decode = m.decode_macs(5);
  EXPECT_EQ(decode.attention.value(), 2 * (256 + 80));
  EXPECT_EQ(decode.total.value(), 2 * (256 + 80) + 2 * 256 + 80);
}

TEST(AccountingTest, AbsorbedDecodeMacs) {
  const ModelShape s = tiny_gpt();
  // gva:1,dr=2 decode: projections 8·12 + 8·4 + 8·2 + 8·8 = 208, q̃ = 2·4·4 = 32;
  // mixing T·H·(d_h + d_r + d_h) = 5·2·10
  AttnMacs gva = AttentionSpec::parse("gva:1,dr=2", s, DType::kF32).decode_macs(5);
  EXPECT_EQ(gva.projections.value(), 208 + 32);
  EXPECT_EQ(gva.mixing.value(), 100);
  // dr = 0 rebuilds every cached key per head: T·H·d_h·d_n, then scores and sums
  AttnMacs gva0 = AttentionSpec::parse("gva:1,dr=0", s, DType::kF32).decode_macs(5);
  EXPECT_EQ(gva0.projections.value(), 64 + 32 + 64);
  EXPECT_EQ(gva0.mixing.value(), 5 * 2 * 16 + 5 * 2 * 8);
  // mla decode: q 8·12, kv_a 8·18, out 8·8, absorb W_uk 2·4·16 and W_uv 2·16·4;
  // mixing over the latent: T·H·(16 + 2 + 16)
  AttnMacs mla = AttentionSpec::parse("mla", s, DType::kF32).decode_macs(5);
  EXPECT_EQ(mla.projections.value(), 96 + 144 + 64 + 128 + 128);
  EXPECT_EQ(mla.mixing.value(), 5 * 2 * 34);
  // gta:1 decode: q 8·8, state 8·4, r 8·2, out 8·8 = 176, q̃ a zero-padded copy; mixing
  // T·H·(d_h + d_r + d_h) = 5·2·10, as gva's
  AttnMacs gta = AttentionSpec::parse("gta:1", s, DType::kF32).decode_macs(5);
  EXPECT_EQ(gta.projections.value(), 176);
  EXPECT_EQ(gta.mixing.value(), 100);
  // gla:hc=2 decode: q 8·12, kv_a 8·20, out 8·8, absorb W_uk 2·4·8 and W_uv 2·8·4; scores
  // and sums over whole rows of d_c + d_r = 10: T·H·2·10
  AttnMacs gla = AttentionSpec::parse("gla:hc=2", s, DType::kF32).decode_macs(5);
  EXPECT_EQ(gla.projections.value(), 96 + 160 + 64 + 64 + 64);
  EXPECT_EQ(gla.mixing.value(), 5 * 2 * 20);
  // linear: constant in T
  EXPECT_EQ(AttentionSpec::parse("linear", s, DType::kF32).decode_macs(5).total(),
            AttentionSpec::parse("linear", s, DType::kF32).decode_macs(5000).total());
  // '+' variants cannot decode
  EXPECT_EQ(AttentionSpec::parse("qk-v+", tiny_encoder(), DType::kF32).decode_macs(5).total(), 0);
}

TEST(AccountingTest, CacheLayoutsOfEveryKernelShape) {
  const ModelShape rope = rope_decoder(16, 64);
  auto layout = [&](const char* text) {
    return AttentionSpec::parse(text, rope, DType::kBf16).cache_layout();
  };
  EXPECT_EQ(layout("gqa:4").kernel, DecodeKernel::kTwoStream);
  EXPECT_EQ(layout("gqa:4").streams,
            (std::vector<CacheStream>{{StreamRole::kKey, 4, 64}, {StreamRole::kValue, 4, 64}}));
  EXPECT_EQ(layout("qk-v").scalars_per_token(), 2 * 16 * 64);  // Q=K≠V saves nothing
  const CacheLayout lumma = layout("q-gqa:8,knorm");
  EXPECT_EQ(lumma.kernel, DecodeKernel::kOneStream);
  EXPECT_EQ(lumma.streams, (std::vector<CacheStream>{{StreamRole::kContent, 8, 64}}));
  EXPECT_TRUE(lumma.rope_on_read);
  EXPECT_TRUE(lumma.norm_on_read);
  EXPECT_FALSE(AttentionSpec::parse("q-kv", tiny_gpt(), DType::kBf16).cache_layout().rope_on_read);
  EXPECT_EQ(layout("gva:4,dr=16").streams,
            (std::vector<CacheStream>{{StreamRole::kContent, 4, 64}, {StreamRole::kRope, 1, 16}}));
  EXPECT_EQ(layout("gva:4,dr=0").kernel, DecodeKernel::kReconstructKeys);
  EXPECT_EQ(layout("gta:4").streams,
            (std::vector<CacheStream>{{StreamRole::kContent, 4, 64}, {StreamRole::kRope, 1, 32}}));
  EXPECT_EQ(layout("gta:4").kernel, DecodeKernel::kOneStream);
  EXPECT_EQ(layout("gla:hc=2").streams,
            (std::vector<CacheStream>{{StreamRole::kContent, 2, 2 * 64 + 32}}));
  EXPECT_EQ(layout("mla:dc=256,dr=32").streams,
            (std::vector<CacheStream>{{StreamRole::kContent, 1, 256}, {StreamRole::kRope, 1, 32}}));
  const CacheLayout linear =
      AttentionSpec::parse("linear", testing::tiny_gpt(), DType::kBf16).cache_layout();
  EXPECT_EQ(linear.kernel, DecodeKernel::kRecurrentState);
  EXPECT_EQ(linear.scalars_per_token(), 0);
  EXPECT_EQ(linear.state_scalars, 2 * (4 * 4 + 4));
  EXPECT_EQ(AttentionSpec::parse("qkv1+", tiny_encoder(), DType::kBf16).cache_layout().kernel,
            DecodeKernel::kNone);
}

TEST(AccountingTest, CacheBytesScaleWithTokensBatchLayersAndDtype) {
  // mha on tiny_gpt: 2·8 scalars per token per layer
  for (auto [dtype, bytes] : {std::pair{DType::kF32, 4}, {DType::kBf16, 2}, {DType::kF16, 2}}) {
    const ModelConfig m = ModelConfig::make(tiny_gpt(), "mha", dtype);
    EXPECT_EQ(m.cache_bytes_per_token().value(), 2 * 16 * bytes);
    EXPECT_EQ(m.cache_bytes(5, 3).value(), 3 * 2 * 5 * 16 * bytes);
    EXPECT_EQ(m.cache_bytes(0, 3).value(), 0);
  }
  // linear: the f32 state only, whatever the context
  const ModelConfig lin = ModelConfig::make(tiny_gpt(), "linear", DType::kBf16);
  EXPECT_EQ(lin.cache_bytes(5, 3).value(), 3 * 2 * 2 * (16 + 4) * 4);
  EXPECT_EQ(lin.cache_bytes(5000, 3).value(), lin.cache_bytes(5, 3).value());
  EXPECT_THROW(lin.cache_bytes(5, 0), SpecError);
  EXPECT_THROW(lin.cache_bytes(-1, 1), SpecError);
}

TEST(AccountingTest, ScaledCacheDtypesCountTheirScales) {
  // Each head row is quantized on its own: q8_0 and q4_0 take ceil(width / 32) blocks of 34 and
  // 18 bytes (32 elements + an f16 scale), fp8 width + 4 bytes (an f32 scale); rope streams
  // stay bf16. Numbers worked by hand for rope_decoder (4 layers, 16 heads × 64).
  const ModelShape rope = rope_decoder();
  auto per_token = [&](const char* attn, DType dtype) {
    return ModelConfig::make(rope, attn, dtype).cache_bytes_per_token().value();
  };
  // gqa:8: 8 K rows + 8 V rows of 64 = 2 blocks each
  EXPECT_EQ(per_token("gqa:8", DType::kQ8_0), 4 * (16 * 2 * 34));   // 4,352
  EXPECT_EQ(per_token("gqa:8", DType::kQ4_0), 4 * (16 * 2 * 18));   // 2,304
  EXPECT_EQ(per_token("gqa:8", DType::kFp8), 4 * (16 * (64 + 4)));  // 4,352
  EXPECT_EQ(per_token("gqa:8", DType::kBf16), 4 * (16 * 64 * 2));   // 8,192
  // mla 512 + 64: one latent row of 16 blocks, the rope key 64 bf16 scalars
  EXPECT_EQ(per_token("mla:dc=512,dr=64", DType::kQ8_0), 4 * (16 * 34 + 128));  // 2,688
  EXPECT_EQ(per_token("mla:dc=512,dr=64", DType::kQ4_0), 4 * (16 * 18 + 128));  // 1,664
  EXPECT_EQ(per_token("mla:dc=512,dr=64", DType::kFp8), 4 * (512 + 4 + 128));   // 2,576
  // gva:8,dr=16: 8 value rows of 2 blocks, the rope key 16 bf16 scalars
  EXPECT_EQ(per_token("gva:8,dr=16", DType::kQ8_0), 4 * (8 * 2 * 34 + 32));  // 2,304
  EXPECT_EQ(per_token("gva:8,dr=16", DType::kQ4_0), 4 * (8 * 2 * 18 + 32));  // 1,280
  // a row shorter than a block still takes a whole one: tiny_gpt's heads are 4 wide
  EXPECT_EQ(ModelConfig::make(tiny_gpt(), "mha", DType::kQ8_0).cache_bytes_per_token().value(),
            2 * (2 * 2 * 34));
  EXPECT_EQ(ModelConfig::make(tiny_gpt(), "mha", DType::kFp8).cache_bytes_per_token().value(),
            2 * (2 * 2 * (4 + 4)));
  // the rope stream's dtype can be set apart from the cache's
  AttentionSpec spec = AttentionSpec::parse("mla:dc=512,dr=64", rope, DType::kQ8_0);
  spec.rope_cache_dtype = DType::kQ8_0;
  EXPECT_EQ(spec.cache_layout().bytes_per_token(), 16 * 34 + 2 * 34);
  EXPECT_EQ(spec.cache_layout().rope_dtype, DType::kQ8_0);
  EXPECT_FALSE(AttentionSpec::parse("mla:dc=512,dr=64", rope, DType::kF16)
                   .cache_layout()
                   .rope_dtype.has_value());  // element dtypes: the rope stream is the cache's
}

TEST(AccountingTest, EquivalentSpecsCountTheSame) {
  const ModelShape rope = rope_decoder();
  auto config = [&](const char* text) { return ModelConfig::make(rope, text, DType::kBf16); };
  // GQA with G = H is MHA; MQA is GQA with G = 1; Q-GQA with G = H is Q≠K=V.
  for (auto [a, b] :
       {std::pair{"gqa:16", "mha"}, {"gqa:1", "mqa"}, {"q-gqa:16", "q-kv"}, {"q-gqa:1", "q-mqa"}}) {
    SCOPED_TRACE(std::string(a) + " vs " + b);
    EXPECT_EQ(config(a).param_count(), config(b).param_count());
    EXPECT_EQ(config(a).attn.cache_layout(), config(b).attn.cache_layout());
    EXPECT_EQ(config(a).prefill_macs(100).total, config(b).prefill_macs(100).total);
    EXPECT_EQ(config(a).decode_macs(100).total, config(b).decode_macs(100).total);
  }
}

TEST(AccountingTest, OverflowIsAnErrorNotAWrongNumber) {
  const ModelConfig m = ModelConfig::make(rope_decoder(), "mha", DType::kF32);
  EXPECT_THROW(m.cache_bytes(int64_t{1} << 40, int64_t{1} << 20), std::overflow_error);
  EXPECT_THROW(m.prefill_macs(int64_t{1} << 32), std::overflow_error);
}

}  // namespace
}  // namespace kvlab
