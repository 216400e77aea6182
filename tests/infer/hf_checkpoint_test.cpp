// Hugging Face model folders in and out: a kvlab model exported and read back through the
// Hugging Face path has bit-identical weights, identical logits, greedy generation and
// sliding-window perplexity; folders written the way transformers writes them (bf16 shards
// with an index, tied embeddings with or without a stored lm_head) load; everything kvlab does
// not implement is refused by name before any weight is read.
#include "nn/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "experiments/eval_text.h"
#include "infer/generator.h"
#include "io/atomic_file.h"
#include "io/hf_model_config.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/mla_attention.h"
#include "nn/nn_test_util.h"
#include "spec/spec_error.h"
#include "tokenizer/tokenizer.h"

namespace kvlab::nn {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/kvlab_hf_test_" + name;
  fs::remove_all(dir);
  return dir;
}

ModelShape byte_llama(bool tied, BiasKind bias) {
  ModelShape s = testing::small_shape(PosScheme::kRope);
  testing::make_llama(s);
  s.vocab_size = 256;
  s.tied_embeddings = tied;
  s.bias = bias;
  s.norm_eps = 1e-6;
  s.rope_theta = 500000.0;
  return s;
}

std::map<std::string, torch::Tensor> parameters(TransformerModelImpl& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m.named_parameters()) out.emplace(item.key(), item.value());
  return out;
}

std::vector<int64_t> greedy(TransformerModel& model, std::vector<int64_t> prompt, int64_t n) {
  infer::Generator gen(model, DType::kF32, static_cast<int64_t>(prompt.size()) + n, 1, 1);
  const int32_t seq = gen.add_sequence();
  torch::Tensor logits = gen.feed(seq, prompt);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(logits.argmax().item<int64_t>());
    logits = gen.step({seq}, {out.back()})[0];
  }
  return out;
}

// The model read back is the model written: bit-identical parameters, the same logits, greedy
// generation through the decode engine and sliding-window loss.
void expect_same_model(TransformerModel& model, TransformerModel& loaded) {
  const auto before = parameters(*model), after = parameters(*loaded);
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [name, tensor] : before) EXPECT_TRUE(tensor.equal(after.at(name))) << name;
  const torch::Tensor tokens = torch::randint(0, 256, {2, 13});
  EXPECT_TRUE(model->forward(tokens).equal(loaded->forward(tokens)));
  const std::vector<int64_t> prompt = {'I', 'n', ' ', 't', 'h', 'e'};
  EXPECT_EQ(greedy(model, prompt, 8), greedy(loaded, prompt, 8));
  std::vector<int64_t> text;
  for (int i = 0; i < 40; ++i) text.push_back((i * 37 + 11) % 256);
  const TextEvalResult a = evaluate_text(*model, text, 16, 8, 2);
  const TextEvalResult b = evaluate_text(*loaded, text, 16, 8, 2);
  EXPECT_EQ(a.loss_nats, b.loss_nats);
  EXPECT_EQ(a.scored_tokens, 39);
}

struct RoundTrip {
  const char* attn;
  bool tied;
  BiasKind bias;
  const char* architecture;
};

TEST(HfCheckpointTest, ExportThenImportIsExact) {
  const RoundTrip cases[] = {
      {"gqa:2", false, BiasKind::kNone, "LlamaForCausalLM"},
      {"mha", true, BiasKind::kNone, "LlamaForCausalLM"},
      {"mqa", false, BiasKind::kQkv, "Qwen2ForCausalLM"},
      {"gva:2,dr=2,qnorm", false, BiasKind::kNone, "KvlabForCausalLM"},
      {"mla:dc=12,dr=4,dq=10", false, BiasKind::kNone, "DeepseekV2ForCausalLM"},
      {"mla:dc=12,dr=4", true, BiasKind::kNone, "DeepseekV2ForCausalLM"},
      {"gqa:2,qknorm", false, BiasKind::kNone, "Qwen3ForCausalLM"},
      {"mla:dc=12,dr=4", false, BiasKind::kAll, "KvlabForCausalLM"},
      {"q-gqa:2,knorm", true, BiasKind::kNone, "KvlabForCausalLM"},
  };
  for (const RoundTrip& c : cases) {
    SCOPED_TRACE(c.attn);
    torch::manual_seed(7);
    const ModelShape shape = byte_llama(c.tied, c.bias);
    TransformerModel model(ModelConfig::make(shape, c.attn, DType::kBf16), torch::kFloat32);
    const std::string dir = temp_dir(std::string("rt_") + c.attn);
    EXPECT_EQ(save_hf_model(*model, dir), c.architecture);
    const json config = json::parse(read_file(dir + "/config.json", 1 << 20));
    EXPECT_EQ(config.at("architectures")[0], c.architecture);

    TransformerModel loaded = load_model(dir);
    EXPECT_EQ(loaded->config().attn.to_string(), model->config().attn.to_string());
    EXPECT_EQ(loaded->config().shape, model->config().shape);
    expect_same_model(model, loaded);
  }
}

TEST(HfCheckpointTest, ExportedTokenizerEncodesTextToItsBytes) {
  const ModelShape shape = byte_llama(false, BiasKind::kNone);
  TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kBf16), torch::kFloat32);
  const std::string dir = temp_dir("tokenizer");
  save_hf_model(*model, dir);
  const tok::Tokenizer tokenizer = tok::Tokenizer::load(dir);
  const std::string text = "In the beginning \xE2\x96\x81 caf\xC3\xA9 \xF0\x9F\x91\x8D\n\t<s> 123";
  const std::vector<int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/true);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(tokenizer.vocab_size(), 256);
}

// The files transformers writes: bf16 tensors, two shards with an index, no lm_head for a tied
// model (or one equal to the embedding).
TEST(HfCheckpointTest, ShardedBf16FoldersLoadConvertedOnce) {
  torch::manual_seed(3);
  const ModelShape shape = byte_llama(true, BiasKind::kNone);
  TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kBf16), torch::kFloat32);
  const std::string dir = temp_dir("sharded");
  save_hf_model(*model, dir);
  fs::remove(dir + "/model.safetensors");
  std::map<std::string, torch::Tensor> shard[2];
  json weight_map = json::object();
  int i = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string name = file_tensor_name(item.key());
    const int s = i++ % 2;
    shard[s].emplace(name, item.value().to(torch::kBFloat16));
    weight_map[name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  save_tensors(dir + "/model-00001-of-00002.safetensors", shard[0]);
  save_tensors(dir + "/model-00002-of-00002.safetensors", shard[1]);
  write_file_atomic(dir + "/model.safetensors.index.json",
                    json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  TransformerModel loaded = load_model(dir);
  for (const auto& [name, tensor] : parameters(*model)) {
    EXPECT_TRUE(tensor.to(torch::kBFloat16).to(torch::kFloat32).equal(parameters(*loaded).at(name)))
        << name;
  }

  // a tied model that stores lm_head.weight too: read as a check
  shard[1].emplace("lm_head.weight", model->model->embed_tokens.to(torch::kBFloat16));
  weight_map["lm_head.weight"] = "model-00002-of-00002.safetensors";
  save_tensors(dir + "/model-00002-of-00002.safetensors", shard[1]);
  write_file_atomic(dir + "/model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  EXPECT_NO_THROW(load_model(dir));
  shard[1]["lm_head.weight"] = torch::zeros_like(shard[1]["lm_head.weight"]);
  save_tensors(dir + "/model-00002-of-00002.safetensors", shard[1]);
  try {
    load_model(dir);
    FAIL() << "accepted an lm_head that differs from the tied embedding";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight differs"), std::string::npos) << e.what();
  }
}

std::string load_error(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(loaded)";
}

// A DeepSeek-style model: MLA with a low-rank query, yarn with DeepSeek's softmax factor, a
// dense first layer then a mixture of experts with V2's or V3's router.
ModelShape deepseek_shape(bool v3) {
  ModelShape s = byte_llama(false, BiasKind::kNone);
  s.n_layers = 3;
  s.rope_scaling.kind = RopeScalingKind::kYarn;
  s.rope_scaling.factor = 4;
  s.rope_scaling.original_context = 8;
  s.rope_scaling.score_mscale = 0.8;
  testing::add_moe(s, /*expert_width=*/8);
  s.moe.n_shared_experts = 2;
  s.moe.n_expert_groups = 2;
  testing::set_deepseek_router(s.moe, v3, /*v2_scale=*/16);
  return s;
}

TEST(HfCheckpointTest, DeepseekStyleExportThenImportIsExact) {
  for (bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "V3" : "V2");
    torch::manual_seed(9);
    TransformerModel model(
        ModelConfig::make(deepseek_shape(v3), "mla:dc=12,dr=4,dq=10", DType::kBf16),
        torch::kFloat32);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters()) {
        if (p.key().find("e_score_correction_bias") != std::string::npos) p.value().uniform_(0, 1);
      }
    }
    const std::string dir = temp_dir(v3 ? "deepseek_v3" : "deepseek_v2");
    const std::string arch = v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM";
    EXPECT_EQ(save_hf_model(*model, dir), arch);
    json config = json::parse(read_file(dir + "/config.json", 1 << 20));
    EXPECT_EQ(config.at("scoring_func"), v3 ? "sigmoid" : "softmax");
    EXPECT_EQ(config.at("topk_method"), v3 ? "noaux_tc" : "group_limited_greedy");
    EXPECT_EQ(config.at("rope_scaling").at("rope_type"), "yarn");
    // DeepSeek's own fields describe the model fully: drop kvlab's block
    config.erase("kvlab");
    write_file_atomic(dir + "/config.json", config.dump());
    // the file holds the shared experts as one MLP and the router's correction bias (V3)
    const SafetensorsFile file = SafetensorsFile::read(dir + "/model.safetensors");
    ASSERT_NE(file.find("model.layers.1.mlp.shared_experts.gate_proj.weight"), nullptr);
    EXPECT_EQ(file.find("model.layers.1.mlp.shared_experts.gate_proj.weight")->shape,
              (std::vector<int64_t>{16, 16}));
    EXPECT_EQ(file.find("model.layers.1.mlp.gate.e_score_correction_bias") != nullptr, v3);

    if (v3) {
      // a multi-token-prediction layer after the last one: skipped when the config declares
      // it, an unexpected tensor when it does not
      std::map<std::string, torch::Tensor> tensors = load_tensors(dir + "/model.safetensors");
      tensors.emplace("model.layers.3.eh_proj.weight", torch::zeros({16, 32}));
      save_tensors(dir + "/model.safetensors", tensors);
      EXPECT_NE(load_error(dir).find("unexpected tensors (not in the model): "
                                     "model.layers.3.eh_proj.weight"),
                std::string::npos)
          << load_error(dir);
      config["num_nextn_predict_layers"] = 1;
      write_file_atomic(dir + "/config.json", config.dump());
    }
    TransformerModel loaded = load_model(dir);
    EXPECT_EQ(loaded->config().shape, model->config().shape);
    EXPECT_EQ(loaded->config().attn.to_string(), model->config().attn.to_string());
    expect_same_model(model, loaded);  // the RoPE rows went out and back
  }
}

// The interleaved RoPE layout, checked against DeepSeek's own form rather than kvlab's: from
// the exported file's tensors, layer 0's scores are computed here with the RoPE slices rotated
// as complex numbers over adjacent channel pairs (DeepSeek's apply_rotary_emb) and yarn's
// frequencies, and must equal the imported model's scores.
TEST(HfCheckpointTest, DeepseekInterleavedRopeMatchesComplexRotation) {
  torch::manual_seed(10);
  ModelShape shape = deepseek_shape(false);
  shape.moe = MoeShape{};
  TransformerModel model(ModelConfig::make(shape, "mla:dc=12,dr=6,dn=4,dv=5", DType::kBf16),
                         torch::kFloat64);
  const std::string dir = temp_dir("deepseek_rope");
  ASSERT_EQ(save_hf_model(*model, dir), "DeepseekV2ForCausalLM");
  const SafetensorsFile file = SafetensorsFile::read(dir + "/model.safetensors");
  const auto tensor = [&](const std::string& name) {
    const TensorInfo* info = file.find(name);
    EXPECT_NE(info, nullptr) << name;
    return torch::from_blob(const_cast<uint8_t*>(file.data(*info)), info->shape, torch::kFloat64)
        .clone();
  };
  const int64_t H = 4, dn = 4, dr = 6, dc = 12, T = 7;
  const torch::Tensor x = torch::randn({1, T, 16}, torch::kFloat64);
  const torch::Tensor q =
      torch::matmul(x, tensor("model.layers.0.self_attn.q_proj.weight").t()).view({T, H, dn + dr});
  const torch::Tensor kv_a =
      torch::matmul(x, tensor("model.layers.0.self_attn.kv_a_proj_with_mqa.weight").t())
          .view({T, dc + dr});
  const torch::Tensor c_raw = kv_a.narrow(-1, 0, dc);
  const torch::Tensor c = c_raw * torch::rsqrt(c_raw.pow(2).mean(-1, true) + shape.norm_eps) *
                          tensor("model.layers.0.self_attn.kv_a_layernorm.weight");
  const torch::Tensor kv = torch::matmul(c, tensor("model.layers.0.self_attn.kv_b_proj.weight").t())
                               .view({T, H, dn + 5});
  // freqs_cis[t, i] = exp(i · t · f_i), f_i from yarn (the formula tested in rope_scaling_test)
  std::vector<double> f;
  for (int64_t i = 0; i < dr / 2; ++i)
    f.push_back(shape.rope_scaling.frequency(i, dr, shape.rope_theta));
  const torch::Tensor angles = torch::outer(torch::arange(T, torch::kFloat64),
                                            torch::tensor(f, torch::kFloat64));  // [T, dr/2]
  const torch::Tensor turn = torch::polar(torch::ones_like(angles), angles);
  const auto rotate = [&](const torch::Tensor& v) {  // [T, n, dr], pairs (2i, 2i+1)
    const torch::Tensor z = torch::view_as_complex(v.contiguous().view({T, -1, dr / 2, 2}));
    return torch::view_as_real(z * turn.unsqueeze(1)).view({T, -1, dr});
  };
  const torch::Tensor q_rope = rotate(q.narrow(-1, dn, dr));                      // [T, H, dr]
  const torch::Tensor k_rope = rotate(kv_a.narrow(-1, dc, dr).view({T, 1, dr}));  // [T, 1, dr]
  const torch::Tensor scores =
      (torch::einsum("thd,shd->hts", {q.narrow(-1, 0, dn), kv.narrow(-1, 0, dn)}) +
       torch::einsum("thd,sd->hts", {q_rope, k_rope.squeeze(1)})) *
      (shape.rope_scaling.score_factor() / std::sqrt(double(dn + dr)));  // [H, T, T]

  TransformerModel loaded = load_model(dir, torch::kFloat64);
  auto& attn = *std::dynamic_pointer_cast<MlaAttentionImpl>(
      loaded->model->layers[0]->as<TransformerBlockImpl>()->self_attn);
  const torch::Tensor ours = attn.scores(x, /*absorbed=*/false)[0];  // [H, T, T]
  EXPECT_LT(testing::max_abs_diff(ours, scores), 1e-10);
  EXPECT_LT(testing::max_abs_diff(attn.scores(x, /*absorbed=*/true)[0], scores), 1e-10);
}

ModelShape byte_gpt2(MlpKind activation, bool tied) {
  ModelShape s = ModelShape::gpt_decoder(/*n_layers=*/2, /*d_model=*/16, /*n_heads=*/4,
                                         /*vocab_size=*/256, /*max_context=*/16);
  s.mlp_kind = activation;
  s.mlp_width = 40;
  s.tied_embeddings = tied;
  return s;
}

// GPT-2 blocks (LayerNorm, GELU, biases, learned positions) with mha go out as
// GPT2LMHeadModel in GPT-2's own layout and come back exactly from GPT-2's fields alone.
TEST(HfCheckpointTest, Gpt2StyleExportThenImportIsExact) {
  for (const bool tanh_gelu : {false, true}) {
    SCOPED_TRACE(tanh_gelu ? "gelu_new, untied" : "gelu, tied");
    torch::manual_seed(11);
    const ModelShape shape =
        byte_gpt2(tanh_gelu ? MlpKind::kGeluTanh : MlpKind::kGelu, /*tied=*/!tanh_gelu);
    TransformerModel model(ModelConfig::make(shape, "mha", DType::kBf16), torch::kFloat32);
    const std::string dir = temp_dir(tanh_gelu ? "gpt2_tanh" : "gpt2");
    ASSERT_EQ(save_hf_model(*model, dir), "GPT2LMHeadModel");
    json config = json::parse(read_file(dir + "/config.json", 1 << 20));
    EXPECT_EQ(config.at("model_type"), "gpt2");
    EXPECT_EQ(config.at("n_embd"), 16);
    EXPECT_EQ(config.at("n_inner"), 40);
    EXPECT_EQ(config.at("activation_function"), tanh_gelu ? "gelu_new" : "gelu");
    EXPECT_EQ(config.at("tie_word_embeddings"), !tanh_gelu);
    config.erase("kvlab");
    write_file_atomic(dir + "/config.json", config.dump());
    const SafetensorsFile file = SafetensorsFile::read(dir + "/model.safetensors");
    ASSERT_NE(file.find("transformer.h.1.attn.c_attn.weight"), nullptr);
    EXPECT_EQ(file.find("transformer.h.1.attn.c_attn.weight")->shape,
              (std::vector<int64_t>{16, 48}));  // Conv1D: [in, 3 · out]
    EXPECT_EQ(file.find("transformer.h.1.mlp.c_fc.weight")->shape, (std::vector<int64_t>{16, 40}));
    EXPECT_EQ(file.find("transformer.wpe.weight")->shape, (std::vector<int64_t>{16, 16}));
    EXPECT_EQ(file.find("lm_head.weight") != nullptr, tanh_gelu);
    EXPECT_EQ(file.tensors().size(), (tanh_gelu ? 5u : 4u) + 2 * 12);

    TransformerModel loaded = load_model(dir);
    EXPECT_EQ(loaded->config().shape, model->config().shape);
    EXPECT_EQ(loaded->config().attn.to_string(), "mha");
    expect_same_model(model, loaded);
  }
}

// The exported file read the way transformers' GPT-2 reads it, computed here from its tensors
// alone: Conv1D layers (x · W + b with W [in, out]), c_attn split into q, k, v, heads of
// n_embd / n_head, causal softmax scaled by 1/√d_h, gelu_new, ln_f, logits against wte. The
// kvlab model's logits must equal it.
TEST(HfCheckpointTest, Gpt2FileComputesWhatGpt2Computes) {
  torch::manual_seed(12);
  const ModelShape shape = byte_gpt2(MlpKind::kGeluTanh, /*tied=*/true);
  TransformerModel model(ModelConfig::make(shape, "mha", DType::kBf16), torch::kFloat64);
  const std::string dir = temp_dir("gpt2_math");
  ASSERT_EQ(save_hf_model(*model, dir), "GPT2LMHeadModel");
  const std::map<std::string, torch::Tensor> w = load_tensors(dir + "/model.safetensors");
  const auto at = [&](const std::string& name) {
    EXPECT_EQ(w.count(name), 1u) << name;
    return w.count(name) ? w.at(name) : torch::zeros({1}, torch::kFloat64);
  };
  const auto layer_norm = [&](const torch::Tensor& x, const std::string& name) {
    const torch::Tensor mean = x.mean(-1, true);
    const torch::Tensor var = (x - mean).pow(2).mean(-1, true);
    return (x - mean) / torch::sqrt(var + 1e-5) * at(name + ".weight") + at(name + ".bias");
  };
  const auto conv1d = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, at(name + ".weight")) + at(name + ".bias");
  };
  const int64_t T = 11, H = 4, dh = 4;
  const torch::Tensor tokens = torch::randint(0, 256, {1, T});
  torch::Tensor h = at("transformer.wte.weight").index_select(0, tokens[0]) +
                    at("transformer.wpe.weight").narrow(0, 0, T);  // [T, D]
  const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "transformer.h." + std::to_string(layer) + ".";
    const std::vector<torch::Tensor> qkv =
        conv1d(layer_norm(h, p + "ln_1"), p + "attn.c_attn").split(16, -1);
    const auto heads = [&](const torch::Tensor& x) { return x.view({T, H, dh}).transpose(0, 1); };
    torch::Tensor scores = torch::matmul(heads(qkv[0]), heads(qkv[1]).transpose(1, 2)) /
                           std::sqrt(double(dh));  // [H, T, T]
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    const torch::Tensor mixed =
        torch::matmul(torch::softmax(scores, -1), heads(qkv[2])).transpose(0, 1).reshape({T, 16});
    h = h + conv1d(mixed, p + "attn.c_proj");
    const torch::Tensor u = conv1d(layer_norm(h, p + "ln_2"), p + "mlp.c_fc");
    const torch::Tensor gelu_new =
        0.5 * u * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * torch::pow(u, 3.0))));
    h = h + conv1d(gelu_new, p + "mlp.c_proj");
  }
  const torch::Tensor logits =
      torch::matmul(layer_norm(h, "transformer.ln_f"), at("transformer.wte.weight").t());
  TransformerModel loaded = load_model(dir, torch::kFloat64);
  EXPECT_LT(testing::max_abs_diff(loaded->forward(tokens)[0], logits), 1e-10);
}

// What the Hub holds for GPT-2: names saved from GPT2Model (no "transformer." prefix), the
// causal-mask buffers older transformers saved, the published config.json's fields.
TEST(HfCheckpointTest, Gpt2FoldersAsPublishedLoadAndBadOnesAreRefusedByName) {
  torch::manual_seed(13);
  const ModelShape shape = byte_gpt2(MlpKind::kGeluTanh, /*tied=*/true);
  TransformerModel model(ModelConfig::make(shape, "mha", DType::kBf16), torch::kFloat32);
  const std::string dir = temp_dir("gpt2_hub");
  ASSERT_EQ(save_hf_model(*model, dir), "GPT2LMHeadModel");
  std::map<std::string, torch::Tensor> hub;
  for (const auto& [name, t] : load_tensors(dir + "/model.safetensors"))
    hub.emplace(name.substr(std::string("transformer.").size()), t.to(torch::kBFloat16));
  for (int layer = 0; layer < 2; ++layer) {
    hub.emplace("h." + std::to_string(layer) + ".attn.bias",
                torch::ones({16, 16}).tril().view({1, 1, 16, 16}));
    hub.emplace("h." + std::to_string(layer) + ".attn.masked_bias", torch::tensor(-1e4));
  }
  save_tensors(dir + "/model.safetensors", hub);
  const json published = {{"activation_function", "gelu_new"},
                          {"architectures", {"GPT2LMHeadModel"}},
                          {"attn_pdrop", 0.1},
                          {"bos_token_id", 50256},
                          {"embd_pdrop", 0.1},
                          {"eos_token_id", 50256},
                          {"initializer_range", 0.02},
                          {"layer_norm_epsilon", 1e-05},
                          {"model_type", "gpt2"},
                          {"n_ctx", 16},
                          {"n_embd", 16},
                          {"n_head", 4},
                          {"n_inner", 40},
                          {"n_layer", 2},
                          {"n_positions", 16},
                          {"resid_pdrop", 0.1},
                          {"summary_activation", nullptr},
                          {"summary_first_dropout", 0.1},
                          {"summary_proj_to_labels", true},
                          {"summary_type", "cls_index"},
                          {"summary_use_proj", true},
                          {"task_specific_params", {{"text-generation", {{"do_sample", true}}}}},
                          {"vocab_size", 256}};
  const auto with = [&](const std::function<void(json&)>& edit) {
    json config = published;
    edit(config);
    write_file_atomic(dir + "/config.json", config.dump());
    return load_error(dir);
  };
  ASSERT_EQ(with([](json&) {}), "(loaded)");
  TransformerModel loaded = load_model(dir);
  const auto before = parameters(*model), after = parameters(*loaded);
  for (const auto& [name, tensor] : before) {
    EXPECT_TRUE(tensor.to(torch::kBFloat16).to(torch::kFloat32).equal(after.at(name))) << name;
  }
  const auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  std::string e = with([](json& c) { c["activation_function"] = "relu"; });
  EXPECT_TRUE(has(e, "activation_function: 'relu' is not implemented")) << e;
  e = with([](json& c) { c["scale_attn_by_inverse_layer_idx"] = true; });
  EXPECT_TRUE(has(e, "scale_attn_by_inverse_layer_idx: true")) << e;
  e = with([](json& c) { c["rotary_dim"] = 4; });
  EXPECT_TRUE(has(e, "rotary_dim: is not a field kvlab understands for GPT2LMHeadModel")) << e;
  e = with([](json& c) { c["model_type"] = "gpt_neo"; });
  EXPECT_TRUE(has(e, "model_type: expected \"gpt2\"")) << e;
  e = with([](json& c) { c["n_inner"] = 32; });
  EXPECT_TRUE(has(e, "wrong shapes: transformer.h.0.mlp.c_fc.bias [40] (expected [32])")) << e;
  hub.erase("h.1.ln_2.bias");
  hub.emplace("h.1.attn.q_proj.weight", torch::zeros({16, 16}));
  save_tensors(dir + "/model.safetensors", hub);
  e = with([](json&) {});
  EXPECT_TRUE(has(e, "missing tensors: transformer.h.1.ln_2.bias")) << e;
  hub.emplace("h.1.ln_2.bias", torch::zeros({16}));
  save_tensors(dir + "/model.safetensors", hub);
  e = with([](json&) {});
  EXPECT_TRUE(has(e, "unexpected tensors (not in the model): transformer.h.1.attn.q_proj.weight"))
      << e;
}

TEST(HfCheckpointTest, RefusesWhatItCannotRunNamingTheFieldOrTensor) {
  const ModelShape shape = byte_llama(false, BiasKind::kNone);
  TransformerModel model(ModelConfig::make(shape, "gqa:2", DType::kBf16), torch::kFloat32);
  const std::string dir = temp_dir("refusals");
  save_hf_model(*model, dir);
  const json good = json::parse(read_file(dir + "/config.json", 1 << 20));
  const auto with = [&](const std::function<void(json&)>& edit) {
    json config = good;
    config.erase("kvlab");
    edit(config);
    write_file_atomic(dir + "/config.json", config.dump());
    return load_error(dir);
  };
  const auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_EQ(with([](json&) {}), "(loaded)");  // Llama's own fields suffice without the kvlab block
  std::string e = with([](json& c) { c["architectures"] = {"GPTJForCausalLM"}; });
  EXPECT_TRUE(has(e, "architectures: ") &&
              has(e, "'GPTJForCausalLM' is not an architecture kvlab loads") &&
              has(e,
                  "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                  "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GPT2LMHeadModel, "
                  "KvlabForCausalLM"))
      << e;
  e = with([](json& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
  EXPECT_TRUE(has(e, "rope_scaling.low_freq_factor: missing (required for llama3)")) << e;
  e = with([](json& c) { c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; });
  EXPECT_TRUE(has(e, "rope type 'dynamic' changes its frequencies")) << e;
  e = with([](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; });
  EXPECT_EQ(e, "(loaded)");
  e = with([](json& c) {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["model_type"] = "qwen3";
  });
  EXPECT_TRUE(has(e, "missing tensors: model.layers.0.self_attn.k_norm.weight")) << e;
  e = with([](json& c) {
    c["architectures"] = {"DeepseekV2ForCausalLM"};
    c["model_type"] = "deepseek_v2";
  });
  EXPECT_TRUE(has(e, "kv_lora_rank: missing: DeepseekV2ForCausalLM is MLA")) << e;
  e = with([](json& c) { c["rope_scaling"] = {{"type", "default"}}; });
  EXPECT_EQ(e, "(loaded)");
  e = with([](json& c) { c["quantization_config"] = json::object(); });
  EXPECT_TRUE(has(e, "quantization_config: is not a field kvlab understands")) << e;
  e = with([](json& c) { c["hidden_act"] = "gelu"; });
  EXPECT_TRUE(has(e, "hidden_act: \"gelu\" (kvlab's gated MLP is SiLU")) << e;
  e = with([](json& c) { c["hidden_act"] = 7; });  // a wrong type is named, not a JSON exception
  EXPECT_TRUE(has(e, "hidden_act: 7")) << e;
  e = with([](json& c) { c["use_sliding_window"] = "yes"; });
  EXPECT_TRUE(has(e, "use_sliding_window: sliding-window attention is not implemented")) << e;
  e = with([](json& c) { c["max_position_embeddings"] = "long"; });
  EXPECT_TRUE(has(e, "max_position_embeddings")) << e;
  e = with([](json& c) { c["model_type"] = "mistral"; });
  EXPECT_TRUE(has(e, "model_type: expected \"llama\"")) << e;
  e = with([](json& c) { c["num_key_value_heads"] = 3; });
  EXPECT_TRUE(has(e, "num_key_value_heads")) << e;
  e = with([](json& c) {
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
    c["sliding_window"] = 4;
  });
  EXPECT_TRUE(has(e, "sliding_window: 4 is shorter than max_position_embeddings 16")) << e;
  e = with([](json& c) { c["hidden_size"] = 32; });  // weights of the wrong width
  EXPECT_TRUE(has(e,
                  "wrong shapes: lm_head.weight [256, 16] (expected [256, 32]), "
                  "model.embed_tokens.weight [256, 16] (expected [256, 32])") &&
              has(e, " in all)"))
      << e;
  e = with([](json& c) { c["tie_word_embeddings"] = true; });
  EXPECT_TRUE(has(e, "tie_word_embeddings is true but lm_head.weight differs")) << e;
  e = with([](json& c) { c["num_hidden_layers"] = 3; });
  EXPECT_TRUE(has(e, "missing tensors: model.layers.2.")) << e;
  write_file_atomic(dir + "/config.json", good.dump());
  fs::remove(dir + "/model.safetensors");
  EXPECT_TRUE(
      has(load_error(dir), "holds neither model.safetensors nor model.safetensors.index.json"));
}

}  // namespace
}  // namespace kvlab::nn
