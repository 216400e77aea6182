#include "spec/model_shape.h"

#include <gtest/gtest.h>

#include "spec/dtype.h"
#include "spec/presets.h"
#include "spec/spec_error.h"
#include "spec/test_shapes.h"

namespace kvlab {
namespace {

std::string field_of(const ModelShape& s) {
  try {
    s.validate();
  } catch (const SpecError& e) {
    return e.field();
  }
  return "";
}

TEST(ModelShapeTest, RejectsImpossibleShapesNamingTheField) {
  ModelShape s = testing::tiny_gpt();
  EXPECT_EQ(field_of(s), "");
  s.n_layers = 0;
  EXPECT_EQ(field_of(s), "layers");
  s = testing::tiny_gpt();
  s.n_heads = -1;
  EXPECT_EQ(field_of(s), "heads");
  s = testing::tiny_gpt();
  s.max_context = 0;  // learned positions need a table
  EXPECT_EQ(field_of(s), "context");
  s = testing::tiny_gpt();
  s.pos = PosScheme::kDrope;  // comes with mla/gva, not a model's own scheme
  EXPECT_EQ(field_of(s), "pos");
  s = testing::tiny_gpt();
  s.kind = ModelKind::kEncoder;
  s.n_classes = 3;  // tied head needs classes == vocab
  EXPECT_EQ(field_of(s), "tied_embeddings");
  s.tied_embeddings = false;
  EXPECT_EQ(field_of(s), "");
  s = testing::tiny_gpt();
  s.kind = ModelKind::kSet;
  s.set_input_dim = 16;
  EXPECT_EQ(field_of(s), "pos");  // sets have no positions
  s.pos = PosScheme::kNone;
  EXPECT_EQ(field_of(s), "");
  s = testing::tiny_gpt();
  s.kind = ModelKind::kVit;
  s.image_size = 28;
  s.patch_size = 5;
  s.image_channels = 1;
  s.n_classes = 10;
  EXPECT_EQ(field_of(s), "patch_size");
  s.patch_size = 4;
  EXPECT_EQ(field_of(s), "");
  EXPECT_EQ(s.n_patches(), 49);
  EXPECT_EQ(s.n_positions(), 50);
  s = testing::rope_decoder();
  s.moe = MoeShape{4, 0, 5, 8, 0};
  EXPECT_EQ(field_of(s), "moe.experts_per_token");
}

TEST(ModelShapeTest, EnumTextRoundTrips) {
  for (ModelKind k : {ModelKind::kDecoder, ModelKind::kEncoder, ModelKind::kVit, ModelKind::kSet}) {
    EXPECT_EQ(parse_model_kind(model_kind_name(k)), k);
  }
  for (BiasKind b : {BiasKind::kNone, BiasKind::kQkv, BiasKind::kAll}) {
    EXPECT_EQ(parse_bias_kind(bias_kind_name(b)), b);
  }
  for (DType d :
       {DType::kF32, DType::kBf16, DType::kF16, DType::kFp8, DType::kQ8_0, DType::kQ4_0}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(parse_mlp_kind("swiglu"), MlpKind::kSwiglu);
  for (MlpKind k : {MlpKind::kGelu, MlpKind::kSwiglu, MlpKind::kGeluTanh}) {
    EXPECT_EQ(parse_mlp_kind(mlp_kind_name(k)), k);
  }
  EXPECT_THROW(parse_mlp_kind("relu"), SpecError);
  EXPECT_EQ(parse_norm_kind("rmsnorm"), NormKind::kRmsNorm);
  EXPECT_EQ(parse_model_pos("rope"), PosScheme::kRope);
  EXPECT_THROW(parse_model_pos("drope"), SpecError);
  EXPECT_THROW(parse_dtype("f64"), SpecError);
  EXPECT_THROW(parse_model_kind("seq2seq"), SpecError);
}

TEST(PresetsTest, UnknownPresetListsTheKnownOnes) {
  try {
    find_preset("llama-4");
    FAIL() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "model");
    EXPECT_NE(std::string(e.what()).find("llama-3-8b"), std::string::npos);
  }
  for (const Preset& p : presets()) EXPECT_NO_THROW(p.shape.validate()) << p.name;
}

// The named starting points carry each kind's conventions (stated here field by field, not read
// back from the constructors) and the Llama 3 8B preset is one of them with its own widths.
TEST(ModelShapeTest, NamedShapesCarryTheirKindsConventions) {
  const ModelShape gpt = ModelShape::gpt_decoder(2, 96, 3, 256, 128);
  EXPECT_EQ(gpt.kind, ModelKind::kDecoder);
  EXPECT_EQ(gpt.head_dim, 32);
  EXPECT_EQ(gpt.mlp_width, 384);
  EXPECT_EQ(gpt.mlp_kind, MlpKind::kGelu);
  EXPECT_EQ(gpt.norm, NormKind::kLayerNorm);
  EXPECT_EQ(gpt.bias, BiasKind::kAll);
  EXPECT_EQ(gpt.pos, PosScheme::kLearned);
  EXPECT_TRUE(gpt.tied_embeddings);
  EXPECT_NO_THROW(gpt.validate());

  const ModelShape llama = ModelShape::llama_decoder(32, 4096, 32, 14336, 128256, 8192, 500000.0);
  EXPECT_EQ(llama, find_preset("llama-3-8b").shape);
  EXPECT_EQ(llama.mlp_kind, MlpKind::kSwiglu);
  EXPECT_EQ(llama.norm, NormKind::kRmsNorm);
  EXPECT_EQ(llama.bias, BiasKind::kNone);
  EXPECT_EQ(llama.pos, PosScheme::kRope);
  EXPECT_FALSE(llama.tied_embeddings);

  const ModelShape encoder = ModelShape::encoder(2, 64, 4, 10, 32);
  EXPECT_EQ(encoder.kind, ModelKind::kEncoder);
  EXPECT_FALSE(encoder.causal());
  EXPECT_EQ(encoder.pos, PosScheme::kSinusoidal);
  EXPECT_FALSE(encoder.tied_embeddings);
  EXPECT_NO_THROW(encoder.validate());

  const ModelShape vit = ModelShape::vision(ModelKind::kVit, 2, 64, 4);
  EXPECT_EQ(vit.kind, ModelKind::kVit);
  EXPECT_EQ(vit.mlp_width, 128);
  EXPECT_FALSE(vit.tied_embeddings);

  // heads that do not divide the width leave head_dim to validate(), which names it
  try {
    ModelShape::gpt_decoder(2, 100, 3, 256, 128).validate();
    FAIL() << "accepted head_dim 0";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "head_dim");
  }
}

}  // namespace
}  // namespace kvlab
