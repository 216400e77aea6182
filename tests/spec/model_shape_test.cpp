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
  for (DType d : {DType::kF32, DType::kBf16, DType::kF16, DType::kFp8}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(parse_mlp_kind("swiglu"), MlpKind::kSwiglu);
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

}  // namespace
}  // namespace kvlab
