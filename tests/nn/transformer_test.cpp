#include "nn/transformer.h"

#include <gtest/gtest.h>

#include "nn/feed_forward.h"
#include "nn/nn_test_util.h"
#include "spec/presets.h"

namespace kvlab::nn {
namespace {

using testing::kF64;
using testing::max_abs_diff;
using testing::small_shape;

ModelShape vit_shape() {
  ModelShape s = small_shape(PosScheme::kLearned, ModelKind::kVit);
  s.image_size = 8;
  s.patch_size = 4;
  s.image_channels = 3;
  s.n_classes = 5;
  return s;
}

ModelShape set_shape() {
  ModelShape s = small_shape(PosScheme::kNone, ModelKind::kSet);
  s.set_input_dim = 6;
  return s;
}

std::vector<std::pair<ModelShape, std::string>> every_model() {
  ModelShape llama = small_shape(PosScheme::kRope, ModelKind::kDecoder, BiasKind::kNone);
  llama.mlp_kind = MlpKind::kSwiglu;
  llama.norm = NormKind::kRmsNorm;
  llama.tied_embeddings = false;
  ModelShape qwen = llama;
  qwen.bias = BiasKind::kQkv;
  ModelShape moe = llama;
  moe.n_layers = 3;
  moe.moe = MoeShape{/*routed=*/4, /*shared=*/2, /*per_token=*/2, /*expert_mlp_width=*/8,
                     /*dense_layers=*/1};
  ModelShape encoder = small_shape(PosScheme::kLearned, ModelKind::kEncoder);
  encoder.n_classes = 7;
  encoder.tied_embeddings = false;
  ModelShape mean_pool = vit_shape();
  mean_pool.class_token = false;
  const ModelShape gpt = small_shape(PosScheme::kLearned);
  std::vector<std::pair<ModelShape, std::string>> out;
  for (const char* attn : {"mha", "gqa:2", "mqa", "qk-v", "q-kv", "qkv1", "q-gqa:2", "q-mqa", "mla",
                           "gva:2,dr=4,qnorm", "gta:2", "gla:hc=2", "linear"}) {
    out.push_back({gpt, attn});
  }
  for (const char* attn :
       {"mha", "q-gqa:2,knorm", "mla:dc=8,dr=2,dq=6", "gva:2,dr=0", "gta:2", "gla:hc=2"}) {
    out.push_back({llama, attn});
  }
  out.push_back({qwen, "gqa:2"});
  out.push_back({moe, "mla"});
  for (const char* attn : {"mha", "qk-v+", "qkv1+", "gva:4,dr=4"}) {
    out.push_back({encoder, attn});
    out.push_back({vit_shape(), attn});
    out.push_back({set_shape(), attn});
  }
  out.push_back({mean_pool, "qk-v"});
  return out;
}

// GPT-2's gelu_new, written out here as transformers' NewGELUActivation writes it, against the
// MLP with kGeluTanh; the exact GELU differs from it (so the kind is not ignored).
TEST(DenseMlpTest, TanhGeluIsGpt2sGeluNew) {
  torch::manual_seed(5);
  ModelShape shape = small_shape(PosScheme::kLearned);
  shape.mlp_kind = MlpKind::kGeluTanh;
  auto mlp = std::make_shared<DenseMlpImpl>(shape, shape.mlp_width,
                                            torch::TensorOptions().dtype(torch::kFloat64));
  const torch::Tensor x = 3 * torch::randn({2, 5, shape.d_model}, kF64);
  const torch::Tensor u = torch::matmul(x, mlp->up_proj->weight.t()) + mlp->up_proj->bias;
  const torch::Tensor act =
      0.5 * u * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * torch::pow(u, 3.0))));
  const torch::Tensor expected =
      torch::matmul(act, mlp->down_proj->weight.t()) + mlp->down_proj->bias;
  EXPECT_LT(max_abs_diff(mlp->forward(x), expected), 1e-12);
  mlp->kind = MlpKind::kGelu;
  EXPECT_GT(max_abs_diff(mlp->forward(x), expected), 1e-4);
}

TEST(TransformerModelTest, ParameterCountEqualsTheSpecsForEveryKind) {
  for (const auto& [shape, attn] : every_model()) {
    SCOPED_TRACE(std::string(model_kind_name(shape.kind)) + " " + attn);
    const ModelConfig config = ModelConfig::make(shape, attn, DType::kF32);
    TransformerModel model(config, kF64);
    EXPECT_EQ(model->parameter_count(), config.param_count().value());
  }
}

TEST(TransformerModelTest, ForwardShapesForEveryKind) {
  torch::manual_seed(20);
  for (const auto& [shape, attn] : every_model()) {
    SCOPED_TRACE(std::string(model_kind_name(shape.kind)) + " " + attn);
    TransformerModel model(ModelConfig::make(shape, attn, DType::kF32), kF64);
    torch::Tensor out;
    switch (shape.kind) {
      case ModelKind::kDecoder:
      case ModelKind::kEncoder:
        out = model->forward(torch::randint(0, shape.vocab_size, {2, 9}));
        EXPECT_EQ(out.sizes(), torch::IntArrayRef({2, 9, shape.output_classes()}));
        break;
      case ModelKind::kVit:
        out = model->forward(torch::randn({2, 3, 8, 8}, kF64));
        EXPECT_EQ(out.sizes(), torch::IntArrayRef({2, 5}));
        break;
      case ModelKind::kSet:
        out = model->forward(torch::randn({2, 10, 6}, kF64));
        EXPECT_EQ(out.sizes(), torch::IntArrayRef({2, 10}));
        break;
    }
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  }
}

TEST(TransformerModelTest, DecoderIsCausalEndToEnd) {
  torch::manual_seed(21);
  for (const auto& [shape, attn] : every_model()) {
    if (shape.kind != ModelKind::kDecoder) continue;
    SCOPED_TRACE(attn);
    TransformerModel model(ModelConfig::make(shape, attn, DType::kF32), kF64);
    const torch::Tensor tokens = torch::randint(0, shape.vocab_size, {2, 10});
    torch::Tensor changed = tokens.clone();
    changed.narrow(1, 6, 4).random_(0, shape.vocab_size);
    const torch::Tensor a = model->forward(tokens), b = model->forward(changed);
    EXPECT_LT(max_abs_diff(a.narrow(1, 0, 6), b.narrow(1, 0, 6)), 1e-12);
  }
}

TEST(TransformerModelTest, SetEncoderIsPermutationEquivariant) {
  torch::manual_seed(22);
  TransformerModel model(ModelConfig::make(set_shape(), "qkv1", DType::kF32), kF64);
  const torch::Tensor x = torch::randn({2, 10, 6}, kF64);
  const torch::Tensor perm = torch::randperm(10);
  EXPECT_LT(max_abs_diff(model->forward(x.index_select(1, perm)),
                         model->forward(x).index_select(1, perm)),
            1e-12);
}

TEST(TransformerModelTest, LearnedPositionsRefuseTokensPastTheTable) {
  TransformerModel model(ModelConfig::make(small_shape(PosScheme::kLearned), "mha", DType::kF32),
                         kF64);
  EXPECT_THROW(model->forward(torch::zeros({1, 17}, torch::kInt64)), std::invalid_argument);
}

// Built on the meta device: no memory, so the full-size presets can be counted.
TEST(TransformerModelTest, PresetsOnTheMetaDeviceMatchTheirCounts) {
  const auto meta = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kMeta);
  for (const char* attn :
       {"mha", "q-kv", "gqa:8", "mqa", "q-gqa:8", "q-mqa", "gva:8,dr=16", "gta:8", "gla:hc=2"}) {
    const ModelConfig config =
        ModelConfig::make(find_preset("paper-1.2b").shape, attn, DType::kBf16);
    TransformerModel model(config, meta);
    EXPECT_EQ(model->parameter_count(), config.param_count().value()) << attn;
  }
  const Preset& lite = find_preset("deepseek-v2-lite");
  const ModelConfig config = ModelConfig::make(lite.shape, lite.attn, DType::kBf16);
  EXPECT_EQ(TransformerModel(config, meta)->parameter_count(), config.param_count().value());
}

}  // namespace
}  // namespace kvlab::nn
