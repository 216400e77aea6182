// Fashion-MNIST classification (a ViT) and seed 003 A.3.2's set-anomaly task (a set model).
#include <array>

#include "data/fashion_mnist.h"
#include "data/task.h"
#include "spec/spec_error.h"

namespace kvlab::data {
namespace {

constexpr uint64_t kImageTrainStream = 10;
constexpr uint64_t kImageEvalStream = 11;
constexpr uint64_t kEvalSeed = 2024;  // every run is scored on the same held-out sets
constexpr int64_t kSetSize = 10;

// The training set's mean and standard deviation of pixel values in [0, 1].
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

torch::Tensor normalise(const torch::Tensor& images_u8) {
  return (images_u8.to(torch::kFloat32) / 255.0f - kPixelMean) / kPixelStd;
}

int64_t checked_eval(int64_t wanted, int64_t available) {
  if (wanted <= 0) throw SpecError("eval_sequences", "must be > 0");
  return std::min(wanted, available);
}

class FashionMnistTask : public Task {
 public:
  FashionMnistTask(std::string dir, int64_t eval_images)
      : dir_(std::move(dir)),
        train_(load_fashion_mnist(dir_, "train")),
        test_(load_fashion_mnist(dir_, "t10k")),
        eval_images_(checked_eval(eval_images, test_.labels.size(0))) {}

  std::string name() const override { return "fashion-mnist"; }
  ModelKind model_kind() const override { return ModelKind::kVit; }
  int64_t vocab_size() const override { return 0; }
  int64_t seq_len() const override { return 0; }
  Metric metric() const override { return Metric::kAccuracy; }
  void configure_model(ModelShape& s) const override {
    s.image_size = 28;
    s.image_channels = 1;
    if (s.patch_size <= 0) s.patch_size = 4;  // seed 003 A.3.1
    s.n_classes = 10;
  }

  Batch train_batch(uint64_t seed, int64_t step, int64_t batch_size) const override {
    std::mt19937_64 rng = stream_rng(seed, kImageTrainStream, static_cast<uint64_t>(step));
    const auto n = static_cast<uint64_t>(train_.labels.size(0));
    torch::Tensor index = torch::empty({batch_size}, torch::kInt64);
    for (int64_t b = 0; b < batch_size; ++b) index[b] = static_cast<int64_t>(rng() % n);
    return {normalise(train_.images.index_select(0, index)).unsqueeze(1),  // [B, 1, 28, 28]
            train_.labels.index_select(0, index)};                         // [B]
  }

  std::vector<Batch> eval_batches(uint64_t, int64_t batch_size) const override {
    std::vector<Batch> out;
    for (int64_t start = 0; start < eval_images_; start += batch_size) {
      const int64_t n = std::min(batch_size, eval_images_ - start);
      out.push_back({normalise(test_.images.narrow(0, start, n)).unsqueeze(1),
                     test_.labels.narrow(0, start, n)});
    }
    return out;
  }

  nlohmann::json to_json() const override {
    return {{"name", name()}, {"seq_len", 1}, {"eval_sequences", eval_images_}, {"data", dir_}};
  }

 private:
  std::string dir_;
  ImageSet train_, test_;
  int64_t eval_images_;
};

class SetAnomalyTask : public Task {
 public:
  SetAnomalyTask(std::string dir, int64_t eval_sets)
      : dir_(std::move(dir)),
        train_(load_fashion_mnist(dir_, "train")),
        test_(load_fashion_mnist(dir_, "t10k")),
        eval_sets_(checked_eval(eval_sets, 100000)),
        train_by_class_(by_class(train_)),
        test_by_class_(by_class(test_)) {}

  std::string name() const override { return "set-anomaly"; }
  ModelKind model_kind() const override { return ModelKind::kSet; }
  int64_t vocab_size() const override { return 0; }
  int64_t seq_len() const override { return kSetSize; }
  Metric metric() const override { return Metric::kAccuracy; }
  void configure_model(ModelShape& s) const override {
    s.set_input_dim = 28 * 28;
    s.pos = PosScheme::kNone;
  }

  Batch train_batch(uint64_t seed, int64_t step, int64_t batch_size) const override {
    std::mt19937_64 rng = stream_rng(seed, kImageTrainStream, static_cast<uint64_t>(step));
    return make_sets(train_, train_by_class_, rng, batch_size);
  }

  std::vector<Batch> eval_batches(uint64_t, int64_t batch_size) const override {
    std::vector<Batch> out;
    for (int64_t start = 0, i = 0; start < eval_sets_; start += batch_size, ++i) {
      std::mt19937_64 rng = stream_rng(kEvalSeed, kImageEvalStream, static_cast<uint64_t>(i));
      out.push_back(
          make_sets(test_, test_by_class_, rng, std::min(batch_size, eval_sets_ - start)));
    }
    return out;
  }

  nlohmann::json to_json() const override {
    return {
        {"name", name()}, {"seq_len", kSetSize}, {"eval_sequences", eval_sets_}, {"data", dir_}};
  }

 private:
  using ClassIndex = std::array<std::vector<int64_t>, 10>;

  static ClassIndex by_class(const ImageSet& set) {
    ClassIndex out;
    const auto labels = set.labels.accessor<int64_t, 1>();
    for (int64_t i = 0; i < set.labels.size(0); ++i) {
      out[static_cast<size_t>(labels[i])].push_back(i);
    }
    return out;
  }

  // Sets [B, 10, 784] and the odd element's index [B].
  static Batch make_sets(const ImageSet& set, const ClassIndex& classes, std::mt19937_64& rng,
                         int64_t batch_size) {
    torch::Tensor index = torch::empty({batch_size, kSetSize}, torch::kInt64);
    torch::Tensor odd = torch::empty({batch_size}, torch::kInt64);
    auto idx = index.accessor<int64_t, 2>();
    for (int64_t b = 0; b < batch_size; ++b) {
      const size_t common = rng() % 10;
      const size_t other = (common + 1 + rng() % 9) % 10;  // any class but the common one
      const int64_t position = static_cast<int64_t>(rng() % kSetSize);
      for (int64_t e = 0; e < kSetSize; ++e) {
        const std::vector<int64_t>& pool = classes[e == position ? other : common];
        idx[b][e] = pool[rng() % pool.size()];
      }
      odd[b] = position;
    }
    const torch::Tensor images = set.images.index_select(0, index.view({-1}));
    return {normalise(images).view({batch_size, kSetSize, 28 * 28}), odd};
  }

  std::string dir_;
  ImageSet train_, test_;
  int64_t eval_sets_;
  ClassIndex train_by_class_, test_by_class_;
};

}  // namespace

std::unique_ptr<Task> make_fashion_mnist_task(const std::string& dir, int64_t eval_images) {
  return std::make_unique<FashionMnistTask>(dir, eval_images);
}

std::unique_ptr<Task> make_set_anomaly_task(const std::string& dir, int64_t eval_sets) {
  return std::make_unique<SetAnomalyTask>(dir, eval_sets);
}

}  // namespace kvlab::data
