#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/task.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "kernels/gemm.h"
#include "nn/checkpoint.h"
#include "nn/threads.h"
#include "spec/spec_error.h"
#include "train/adamw.h"
#include "train/trainer.h"

namespace kvlab::train {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/kvlab_train_test_" + name;
  fs::remove_all(dir);
  return dir;
}

ModelShape tiny_encoder(int64_t seq_len) {
  ModelShape s;
  s.kind = ModelKind::kEncoder;
  s.n_layers = 1;
  s.d_model = 16;
  s.n_heads = 2;
  s.head_dim = 8;
  s.mlp_width = 32;
  s.vocab_size = 10;
  s.max_context = seq_len;
  s.tied_embeddings = false;
  s.pos = PosScheme::kSinusoidal;
  return s;
}

TrainOptions short_run(int64_t steps) {
  TrainOptions o;
  o.steps = steps;
  o.batch = 8;
  o.warmup = 2;
  o.eval_batch = 64;
  o.seed = 3;
  return o;
}

std::unique_ptr<data::Task> task(const std::string& name, int64_t n = 8) {
  return data::make_task({name, n, 64, ""});
}

TEST(TaskTest, SyntheticTargetsFollowTheSeedsDefinitions) {
  const data::Batch b = task("reverse", 6)->train_batch(1, 0, 4);
  EXPECT_TRUE(b.targets.equal(b.inputs.flip(1)));
  const data::Batch sub = task("sub", 6)->train_batch(1, 0, 4);
  EXPECT_TRUE(sub.targets.equal(9 - sub.inputs));
  const data::Batch sorted = task("sort", 6)->train_batch(1, 0, 4);
  EXPECT_TRUE(sorted.targets.equal(std::get<0>(sorted.inputs.sort(1))));
  const data::Batch swap = task("swap", 6)->train_batch(1, 0, 4);
  EXPECT_TRUE(swap.targets.equal(
      torch::cat({swap.inputs.narrow(1, 3, 3), swap.inputs.narrow(1, 0, 3)}, 1)));
  const data::Batch copy = task("copy", 6)->train_batch(1, 0, 4);
  EXPECT_TRUE(copy.targets.equal(copy.inputs));
  EXPECT_TRUE((copy.inputs >= 0).all().item<bool>() && (copy.inputs <= 9).all().item<bool>());
}

TEST(TaskTest, BatchesArePureFunctionsOfSeedAndStep) {
  const auto t = task("copy", 12);
  EXPECT_TRUE(t->train_batch(5, 7, 16).inputs.equal(t->train_batch(5, 7, 16).inputs));
  EXPECT_FALSE(t->train_batch(5, 7, 16).inputs.equal(t->train_batch(5, 8, 16).inputs));
  EXPECT_FALSE(t->train_batch(5, 7, 16).inputs.equal(t->train_batch(6, 7, 16).inputs));
  // the held-out stream is not the training stream
  const auto eval = t->eval_batches(5, 16);
  EXPECT_EQ(eval.size(), 4u);  // 64 sequences in batches of 16
  EXPECT_FALSE(eval[0].inputs.equal(t->train_batch(5, 0, 16).inputs));
  EXPECT_TRUE(eval[0].inputs.equal(t->eval_batches(5, 16)[0].inputs));
}

TEST(TaskTest, BadTaskOptionsNameTheField) {
  auto field = [](const data::TaskOptions& o) {
    try {
      data::make_task(o);
    } catch (const SpecError& e) {
      return e.field();
    }
    return std::string();
  };
  EXPECT_EQ(field({"swap", 7, 64, ""}), "seq_len");
  EXPECT_EQ(field({"revers", 8, 64, ""}), "task");
  EXPECT_EQ(field({"copy", 0, 64, ""}), "seq_len");
  EXPECT_EQ(field({"text", 8, 64, ""}), "data");
  EXPECT_EQ(field({"text", 8, 64, "/nonexistent/file.txt"}), "data");
  const std::string small = temp_dir("small.txt");
  write_file_atomic(small, "tiny");
  EXPECT_EQ(field({"text", 8, 64, small}), "data");
}

TEST(TaskTest, TextHoldsOutTheLastFivePercent) {
  const std::string path = temp_dir("text.txt");
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + i % 26);
  write_file_atomic(path, text);
  const auto t = data::make_task({"text", 16, 1000, path});
  const data::Batch b = t->train_batch(0, 3, 4);
  EXPECT_TRUE(b.targets.narrow(1, 0, 15).equal(b.inputs.narrow(1, 1, 15)));  // next byte
  const auto eval = t->eval_batches(0, 64);
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0].inputs.size(0), 100 / 16);  // the last 100 bytes, windows of 16 + 1
  EXPECT_EQ(eval[0].inputs[0][0].item<int64_t>(), 'a' + 1900 % 26);
}

TEST(AdamWTest, MatchesTorchAdamWAndSkipsDecayOnVectors) {
  torch::manual_seed(0);
  const torch::Tensor w0 = torch::randn({4, 3}, torch::kFloat64);
  const torch::Tensor b0 = torch::randn({4}, torch::kFloat64);
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor tw = w0.clone().requires_grad_(), tb = b0.clone().requires_grad_();
  AdamW ours({{"w", w}, {"b", b}}, {0.9, 0.95, 1e-8, 0.1});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<torch::Tensor>{tw},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  groups.emplace_back(
      std::vector<torch::Tensor>{tb},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(0.01));
  const torch::Tensor x = torch::randn({5, 3}, torch::kFloat64);
  for (int step = 0; step < 4; ++step) {
    ours.zero_grad();
    reference.zero_grad();
    (torch::matmul(x, w.t()) + b).pow(2).sum().backward();
    (torch::matmul(x, tw.t()) + tb).pow(2).sum().backward();
    ours.step(0.01);
    reference.step();
  }
  EXPECT_LT((w - tw).abs().max().item<double>(), 1e-12);
  EXPECT_LT((b - tb).abs().max().item<double>(), 1e-12);
  EXPECT_EQ(ours.steps_taken(), 4);
}

TEST(AdamWTest, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(learning_rate(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(learning_rate(55, 100, 10, 1.0, 0.1), 0.55, 1e-12);  // halfway: floor + half
  EXPECT_NEAR(learning_rate(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
}

std::map<std::string, torch::Tensor> params_of(nn::TransformerModelImpl& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m.named_parameters())
    out.emplace(item.key(), item.value().detach().clone());
  return out;
}

bool bitwise_equal(const std::map<std::string, torch::Tensor>& a,
                   const std::map<std::string, torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    if (!b.count(name) || !t.equal(b.at(name))) return false;
  }
  return true;
}

TEST(TrainerTest, SameSeedSameParameters) {
  nn::set_threads(1);
  const ModelConfig config = ModelConfig::make(tiny_encoder(8), "gva:1,dr=0", DType::kF32);
  Trainer a(config, task("reverse"), short_run(6), temp_dir("det_a"));
  Trainer b(config, task("reverse"), short_run(6), temp_dir("det_b"));
  ASSERT_EQ(a.run(nullptr).status, TrainResult::Status::kFinished);
  ASSERT_EQ(b.run(nullptr).status, TrainResult::Status::kFinished);
  EXPECT_TRUE(bitwise_equal(params_of(a.model()), params_of(b.model())));
}

TEST(TrainerTest, InterruptedAndResumedEqualsUninterruptedBitwise) {
  nn::set_threads(1);
  for (const char* attn : {"mha", "qk-v+", "gva:2,dr=0"}) {
    SCOPED_TRACE(attn);
    const ModelConfig config = ModelConfig::make(tiny_encoder(8), attn, DType::kF32);
    TrainOptions options = short_run(12);
    options.accumulation = 2;
    options.eval_every = 4;
    Trainer straight(config, task("swap"), options, temp_dir("straight"));
    ASSERT_EQ(straight.run(nullptr).status, TrainResult::Status::kFinished);

    const std::string dir = temp_dir("interrupted");
    std::atomic<bool> stop{false};
    {
      Trainer first(config, task("swap"), options, dir);
      const TrainResult r = first.run(&stop, [&](int64_t step, double, double) {
        if (step == 5) stop.store(true);
      });
      ASSERT_EQ(r.status, TrainResult::Status::kInterrupted);
      EXPECT_EQ(r.step, 5);
    }
    auto resumed = Trainer::resume(dir);
    EXPECT_EQ(resumed->step(), 5);
    const TrainResult r = resumed->run(nullptr);
    ASSERT_EQ(r.status, TrainResult::Status::kFinished);
    EXPECT_EQ(r.step, 12);
    EXPECT_TRUE(bitwise_equal(params_of(straight.model()), params_of(resumed->model())));
    // the log holds each step once
    std::ifstream log(dir + "/log.jsonl");
    int64_t step_records = 0;
    for (std::string line; std::getline(log, line);) {
      step_records +=
          line.find("\"loss\"") != std::string::npos && line.find("eval_loss") == std::string::npos;
    }
    EXPECT_EQ(step_records, 12);
  }
}

// --matmul-precision bf16 is applied (the weights differ from f32's after a few steps, by
// less than training moves them) and recorded: a resumed run continues at bf16, bit for bit.
TEST(TrainerTest, Bf16MatmulsAreUsedAndKeptAcrossAResume) {
  if (!bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 or AMX";
  nn::set_threads(1);
  const ModelConfig config = ModelConfig::make(tiny_encoder(8), "gqa:2", DType::kF32);
  TrainOptions options = short_run(10);
  Trainer f32(config, task("swap"), options, temp_dir("f32_matmuls"));
  ASSERT_EQ(f32.run(nullptr).status, TrainResult::Status::kFinished);
  options.matmul_precision = "bf16";
  Trainer straight(config, task("swap"), options, temp_dir("bf16_straight"));
  ASSERT_EQ(straight.run(nullptr).status, TrainResult::Status::kFinished);
  const auto p32 = params_of(f32.model()), p16 = params_of(straight.model());
  double largest_difference = 0;
  for (const auto& [name, t] : p32) {
    largest_difference =
        std::max(largest_difference, (t - p16.at(name)).abs().max().item<double>());
  }
  EXPECT_GT(largest_difference, 0) << "bf16 products gave f32's weights bit for bit";
  EXPECT_LT(largest_difference, 1e-2);

  const std::string dir = temp_dir("bf16_interrupted");
  std::atomic<bool> stop{false};
  {
    Trainer first(config, task("swap"), options, dir);
    first.run(&stop, [&](int64_t step, double, double) {
      if (step == 4) stop.store(true);
    });
  }
  auto resumed = Trainer::resume(dir);
  ASSERT_EQ(resumed->run(nullptr).status, TrainResult::Status::kFinished);
  EXPECT_TRUE(bitwise_equal(p16, params_of(resumed->model())));
}

TEST(TrainerTest, AccumulationComputesTheSameGlobalBatch) {
  nn::set_threads(1);
  const ModelConfig config = ModelConfig::make(tiny_encoder(8), "q-kv", DType::kF32);
  TrainOptions one = short_run(5);
  TrainOptions two = one;
  two.accumulation = 4;
  Trainer a(config, task("sort"), one, temp_dir("acc1"));
  Trainer b(config, task("sort"), two, temp_dir("acc4"));
  a.run(nullptr);
  b.run(nullptr);
  const auto pa = params_of(a.model()), pb = params_of(b.model());
  for (const auto& [name, t] : pa) {
    EXPECT_LT((t - pb.at(name)).abs().max().item<double>(), 1e-5) << name;
  }
}

TEST(TrainerTest, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  nn::set_threads(1);
  const ModelConfig config = ModelConfig::make(tiny_encoder(8), "mha", DType::kF32);
  const std::string dir = temp_dir("nan");
  TrainOptions options = short_run(6);
  options.checkpoint_every = 2;
  Trainer trainer(config, task("copy"), options, dir);
  std::atomic<bool> stop{false};
  trainer.run(&stop, [&](int64_t step, double, double) {
    if (step == 3) {
      torch::NoGradGuard no_grad;
      trainer.model().model->norm->weight.fill_(std::numeric_limits<float>::quiet_NaN());
    }
  });
  const TrainResult r = trainer.run(nullptr);
  EXPECT_EQ(r.status, TrainResult::Status::kDiverged);
  EXPECT_NE(r.message.find("at step 3"), std::string::npos) << r.message;
  auto resumed = Trainer::resume(dir);
  EXPECT_EQ(resumed->step(), 2);  // the checkpoint before the NaN
  for (const auto& item : resumed->model().named_parameters()) {
    EXPECT_TRUE(torch::isfinite(item.value()).all().item<bool>()) << item.key();
  }
}

// A teacher and a student saved as checkpoints (tiny encoders on "reverse": 10 classes).
struct DistillationModels {
  std::string teacher, student;
};

DistillationModels save_distillation_models(const std::string& name) {
  DistillationModels m{temp_dir(name + "_teacher"), temp_dir(name + "_student")};
  torch::manual_seed(21);
  nn::save_model(*nn::TransformerModel(ModelConfig::make(tiny_encoder(8), "mha", DType::kF32),
                                       torch::kFloat32),
                 m.teacher);
  torch::manual_seed(22);
  nn::save_model(*nn::TransformerModel(ModelConfig::make(tiny_encoder(8), "q-kv", DType::kF32),
                                       torch::kFloat32),
                 m.student);
  return m;
}

std::vector<double> logged(const std::string& dir, const std::string& key) {
  std::vector<double> values;
  std::ifstream log(dir + "/log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains(key) && record[key].is_number())
      values.push_back(record[key].get<double>());
  }
  return values;
}

TEST(TrainerTest, InitFromStartsAtTheCheckpointsWeights) {
  nn::set_threads(1);
  const DistillationModels m = save_distillation_models("init");
  TrainOptions options = short_run(1);
  options.init_from = m.student;
  const std::unique_ptr<Trainer> t =
      Trainer::from_checkpoint(task("reverse"), options, temp_dir("init_run"));
  EXPECT_EQ(t->model().config().attn.to_string(), "q-kv");
  EXPECT_TRUE(bitwise_equal(params_of(t->model()), params_of(*nn::load_model(m.student))));
  // a model that does not fit the task is refused
  ModelShape shape = tiny_encoder(8);
  shape.vocab_size = 12;
  options.init_from = temp_dir("init_other");
  nn::save_model(
      *nn::TransformerModel(ModelConfig::make(shape, "mha", DType::kF32), torch::kFloat32),
      options.init_from);
  try {
    Trainer::from_checkpoint(task("reverse"), options, temp_dir("init_bad"));
    ADD_FAILURE() << "expected an error";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "init-from");
  }
}

TEST(TrainerTest, DistillationLossIsTheMixOfCrossEntropyAndTemperedKl) {
  nn::set_threads(1);
  const DistillationModels m = save_distillation_models("kd");
  TrainOptions options = short_run(1);
  options.init_from = m.student;
  options.distill_from = m.teacher;
  options.kd_alpha = 0.25;
  options.kd_temperature = 3.0;
  const std::string dir = temp_dir("kd_run");
  const std::unique_ptr<Trainer> t = Trainer::from_checkpoint(task("reverse"), options, dir);
  ASSERT_EQ(t->run(nullptr).status, TrainResult::Status::kFinished);
  // step 1's loss from the first batch, computed here in f64 with explicit sums
  const data::Batch batch = task("reverse")->train_batch(options.seed, 0, options.batch);
  torch::NoGradGuard no_grad;
  const torch::Tensor s = nn::load_model(m.student)->forward(batch.inputs).to(torch::kFloat64);
  const torch::Tensor q = nn::load_model(m.teacher)->forward(batch.inputs).to(torch::kFloat64);
  const double T = 3.0;
  const torch::Tensor ps = (s / T).exp() / (s / T).exp().sum(-1, true);
  const torch::Tensor pt = (q / T).exp() / (q / T).exp().sum(-1, true);
  const double kl = (pt * (pt.log() - ps.log())).sum(-1).mean().item<double>();
  const torch::Tensor p = s.exp() / s.exp().sum(-1, true);
  const double ce = -p.gather(-1, batch.targets.unsqueeze(-1)).log().mean().item<double>();
  const std::vector<double> loss = logged(dir, "loss"), ce_logged = logged(dir, "ce");
  ASSERT_EQ(ce_logged.size(), 1u);
  EXPECT_NEAR(ce_logged[0], ce, 1e-5);
  EXPECT_NEAR(loss[0], 0.25 * ce + 0.75 * T * T * kl, 1e-5);
  EXPECT_GT(kl, 1e-3);  // distinct models: the KL term is really there
}

TEST(TrainerTest, DistillationWithAlphaOneIsPlainTrainingAndResumesWithItsTeacher) {
  nn::set_threads(1);
  const DistillationModels m = save_distillation_models("kd1");
  TrainOptions plain = short_run(6);
  plain.init_from = m.student;
  TrainOptions kd = plain;
  kd.distill_from = m.teacher;
  kd.kd_alpha = 1.0;
  const std::unique_ptr<Trainer> a =
      Trainer::from_checkpoint(task("reverse"), plain, temp_dir("kd1_a"));
  const std::unique_ptr<Trainer> b =
      Trainer::from_checkpoint(task("reverse"), kd, temp_dir("kd1_b"));
  a->run(nullptr);
  b->run(nullptr);
  EXPECT_TRUE(bitwise_equal(params_of(a->model()), params_of(b->model())));
  // interrupted and resumed with the teacher equals straight through
  kd.kd_alpha = 0.5;
  const std::unique_ptr<Trainer> straight =
      Trainer::from_checkpoint(task("reverse"), kd, temp_dir("kd1_straight"));
  straight->run(nullptr);
  const std::string dir = temp_dir("kd1_cut");
  std::atomic<bool> stop{false};
  Trainer::from_checkpoint(task("reverse"), kd, dir)->run(&stop, [&](int64_t step, double, double) {
    if (step == 3) stop.store(true);
  });
  const std::unique_ptr<Trainer> resumed = Trainer::resume(dir);
  EXPECT_EQ(resumed->options().distill_from, m.teacher);
  resumed->run(nullptr);
  EXPECT_TRUE(bitwise_equal(params_of(straight->model()), params_of(resumed->model())));
}

TEST(TrainerTest, TeacherWithAnotherVocabularyIsRefused) {
  const DistillationModels m = save_distillation_models("kdv");
  const std::string other = temp_dir("kdv_other");
  ModelShape shape = tiny_encoder(8);
  shape.vocab_size = 12;
  nn::save_model(
      *nn::TransformerModel(ModelConfig::make(shape, "mha", DType::kF32), torch::kFloat32), other);
  TrainOptions options = short_run(1);
  options.init_from = m.student;
  options.distill_from = other;
  try {
    Trainer::from_checkpoint(task("reverse"), options, temp_dir("kdv_run"));
    ADD_FAILURE() << "expected an error";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "distill-from");
    EXPECT_NE(std::string(e.what()).find("share the vocabulary"), std::string::npos) << e.what();
  }
  options.distill_from.clear();
  options.kd_alpha = 0.3;
  EXPECT_THROW(options.validate(), SpecError);
}

TEST(CheckpointTest, RoundTripAndBrokenFiles) {
  const ModelConfig config = ModelConfig::make(tiny_encoder(8), "gva:2,dr=0,qnorm", DType::kF32);
  nn::TransformerModel model(config, torch::kFloat32);
  const std::string dir = temp_dir("ckpt");
  nn::save_model(*model, dir, {{"task", {{"name", "copy"}}}});
  nn::TransformerModel loaded = nn::load_model(dir);
  EXPECT_TRUE(bitwise_equal(params_of(*model), params_of(*loaded)));
  EXPECT_EQ(loaded->config().attn.to_string(), "gva:2,dr=0,qnorm");
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.tmp." + std::to_string(::getpid())));

  const std::string bytes = read_file(dir + "/model.safetensors", uint64_t{1} << 30);
  write_file_atomic(dir + "/model.safetensors", bytes.substr(0, bytes.size() - 3));
  EXPECT_THROW(nn::load_model(dir), SafetensorsError);

  // a tensor of the wrong shape: weights of a wider model under this config
  ModelShape wide = tiny_encoder(8);
  wide.d_model = 32;
  wide.head_dim = 16;
  nn::TransformerModel other(ModelConfig::make(wide, "gva:2,dr=0,qnorm", DType::kF32),
                             torch::kFloat32);
  const std::string other_dir = temp_dir("ckpt_other");
  nn::save_model(*other, other_dir);
  fs::copy_file(other_dir + "/model.safetensors", dir + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  try {
    nn::load_model(dir);
    FAIL() << "accepted";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("has shape"), std::string::npos) << e.what();
  }

  write_file_atomic(dir + "/config.json", "{\"model\": {\"kind\": \"encoder\"}}");
  EXPECT_THROW(nn::load_model(dir), SpecError);
  write_file_atomic(dir + "/config.json", "not json");
  EXPECT_THROW(nn::load_model(dir), SpecError);
}

// Runs written when the shared experts were separate MLPs ("shared_experts.{i}.…") load into
// the one MLP of their concatenated rows: the same weights, bit for bit.
TEST(CheckpointTest, OldSeparateSharedExpertsLoadMerged) {
  ModelShape shape = tiny_encoder(8);
  shape.kind = ModelKind::kDecoder;
  shape.norm = NormKind::kRmsNorm;
  shape.mlp_kind = MlpKind::kSwiglu;
  shape.bias = BiasKind::kNone;
  shape.pos = PosScheme::kRope;
  shape.moe = MoeShape{4, 2, 2, 6, 0};
  nn::TransformerModel model(ModelConfig::make(shape, "gqa:1", DType::kF32), torch::kFloat32);
  const std::string dir = temp_dir("ckpt_shared_experts");
  nn::save_model(*model, dir);
  std::map<std::string, torch::Tensor> tensors = nn::load_tensors(dir + "/model.safetensors");
  int split = 0;
  for (int64_t layer = 0; layer < shape.n_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.shared_experts.";
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      auto node = tensors.extract(p + proj + ".weight");
      ASSERT_FALSE(node.empty()) << p << proj;
      const int64_t dim = std::string(proj) == "down_proj" ? 1 : 0;
      const std::vector<torch::Tensor> halves = node.mapped().chunk(2, dim);
      for (int i = 0; i < 2; ++i) {
        tensors.emplace(p + std::to_string(i) + "." + proj + ".weight", halves[i].contiguous());
      }
      ++split;
    }
  }
  EXPECT_EQ(split, 3 * shape.n_layers);
  nn::save_tensors(dir + "/model.safetensors", tensors);
  nn::TransformerModel loaded = nn::load_model(dir);
  EXPECT_TRUE(bitwise_equal(params_of(*model), params_of(*loaded)));
}

}  // namespace
}  // namespace kvlab::train

namespace kvlab::train {
namespace {

TEST(CheckpointTest, EmbeddingsCarryHuggingFaceNamesAndOldNamesStillLoad) {
  ModelShape shape = tiny_encoder(8);
  shape.pos = PosScheme::kLearned;
  const ModelConfig config = ModelConfig::make(shape, "gqa:1", DType::kF32);
  nn::TransformerModel model(config, torch::kFloat32);
  const std::string dir = temp_dir("ckpt_names");
  nn::save_model(*model, dir);
  std::map<std::string, torch::Tensor> tensors = nn::load_tensors(dir + "/model.safetensors");
  ASSERT_EQ(tensors.count("model.embed_tokens.weight"), 1u);
  ASSERT_EQ(tensors.count("model.embed_positions.weight"), 1u);
  EXPECT_EQ(tensors.count("model.embed_tokens"), 0u);
  EXPECT_TRUE(tensors.at("model.embed_tokens.weight").equal(model->model->embed_tokens));

  // a run written before the rename
  for (const char* name : {"model.embed_tokens", "model.embed_positions"}) {
    auto node = tensors.extract(std::string(name) + ".weight");
    node.key() = name;
    tensors.insert(std::move(node));
  }
  nn::save_tensors(dir + "/model.safetensors", tensors);
  nn::TransformerModel loaded = nn::load_model(dir);
  EXPECT_TRUE(bitwise_equal(params_of(*model), params_of(*loaded)));
}

}  // namespace
}  // namespace kvlab::train
