// The real data sets of the lm and vision suites (installed by scripts/install-deps) and
// their loaders' answers to malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "data/fashion_mnist.h"
#include "data/kjv.h"
#include "data/task.h"
#include "spec/spec_error.h"

namespace kvlab::data {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SpecError& e) {
    return std::string(e.field()) + ": " + e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// DESIGN.md: a test that needs a data package skips, saying so, when it is absent
// (scripts/install-deps installs both).
#define REQUIRE_KJV()                                                                \
  if (!fs::exists("/usr/bin/bible")) {                                               \
    GTEST_SKIP() << "bible-kjv is not installed (scripts/install-deps installs it)"; \
  }
#define REQUIRE_FASHION_MNIST()                                                                  \
  if (!fs::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {              \
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)"; \
  }

TEST(KjvTest, SplitsAtBookHeadersAndHoldsOutEveryTenthBook) {
  std::string text = "\n";
  for (int b = 0; b < 12; ++b) {
    for (int chapter = 1; chapter <= 2; ++chapter) {
      text += "Book " + std::string(1, static_cast<char>('A' + b)) + " " + std::to_string(chapter) +
              "\n\n  1 Verse of book " + std::to_string(b) +
              "\ncontinued\n  2 Another 12 verse.\n\n";
    }
  }
  const KjvSplit split = split_kjv(text);
  ASSERT_EQ(split.books.size(), 12u);
  EXPECT_EQ(split.books[3], "Book D");
  EXPECT_EQ(split.validation_books, std::vector<std::string>{"Book J"});
  EXPECT_TRUE(contains(split.validation, "Verse of book 9"));
  EXPECT_FALSE(contains(split.validation, "Verse of book 8"));
  EXPECT_FALSE(contains(split.train, "Verse of book 9"));
  EXPECT_EQ(split.train.size() + split.validation.size(), text.size() - 1);  // all but the "\n"
  EXPECT_TRUE(
      contains(error_of([] { split_kjv("just some text\nwithout headers\n"); }), "book headers"));
  EXPECT_TRUE(contains(error_of([] { split_kjv("\nGenesis 3\n\n  1 x\n"); }), "chapter 3"));
}

TEST(KjvTest, TheDebianTextHas66BooksAndASixBookValidationSet) {
  REQUIRE_KJV();
  const KjvSplit split = split_kjv(read_kjv_text(""));
  ASSERT_EQ(split.books.size(), 66u);
  EXPECT_EQ(split.books.front(), "Genesis");
  EXPECT_EQ(split.books.back(), "Revelation");
  EXPECT_EQ(split.validation_books,
            (std::vector<std::string>{"2 Samuel", "Proverbs", "Amos", "Matthew", "Philippians",
                                      "1 Peter"}));
  EXPECT_EQ(split.validation.size(), 373236u);
  EXPECT_TRUE(contains(error_of([] { read_kjv_text("/nonexistent/kjv.txt"); }), "data"));
}

// Writes an IDX file (uncompressed: zlib reads plain files through gzread too).
void write_idx(const std::string& path, uint32_t magic, std::vector<uint32_t> dims,
               size_t payload) {
  std::ofstream out(path, std::ios::binary);
  auto put = [&](uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
    out.write(b, 4);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out << std::string(payload, '\1');
}

TEST(FashionMnistTest, MalformedFilesAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / "kvlab_fmnist_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  const std::string images = d + "/t10k-images-idx3-ubyte.gz";
  const std::string labels = d + "/t10k-labels-idx1-ubyte.gz";
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "t10k"); }), "cannot open"));
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "test"); }), "unknown"));
  write_idx(labels, 0x801, {10}, 10);
  write_idx(images, 0x801, {10, 28, 28}, 7840);  // a labels magic on the images
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "t10k"); }), "IDX magic"));
  write_idx(images, 0x803, {10, 28, 28}, 7000);  // truncated
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "t10k"); }), "header promises"));
  write_idx(images, 0x803, {10, 27, 27}, 7290);
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "t10k"); }), "28×28"));
  write_idx(images, 0x803, {10, 28, 28}, 7840);  // well formed, but 10 images, not 10,000
  EXPECT_TRUE(contains(error_of([&] { load_fashion_mnist(d, "t10k"); }), "expected 10000"));
  fs::remove_all(dir);
}

TEST(FashionMnistTest, TheDebianFilesHold60000And10000BalancedImages) {
  REQUIRE_FASHION_MNIST();
  const ImageSet train = load_fashion_mnist(kFashionMnistDir, "train");
  const ImageSet test = load_fashion_mnist(kFashionMnistDir, "t10k");
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(test.labels.size(0), 10000);
  EXPECT_EQ(train.labels.bincount().min().item<int64_t>(), 6000);
  EXPECT_EQ(train.labels.bincount().max().item<int64_t>(), 6000);
}

TEST(SetAnomalyTest, NineImagesShareAClassAndTheTargetIsTheOddOne) {
  REQUIRE_FASHION_MNIST();
  const auto task = make_task({"set-anomaly", 1, 64, ""});
  const ImageSet train = load_fashion_mnist(kFashionMnistDir, "train");
  // image bytes -> labels it carries in the training set
  std::map<std::string, std::set<int64_t>> label_of;
  const auto* pixels = train.images.data_ptr<uint8_t>();
  for (int64_t i = 0; i < 60000; ++i) {
    label_of[std::string(reinterpret_cast<const char*>(pixels + i * 784), 784)].insert(
        train.labels[i].item<int64_t>());
  }
  const Batch b = task->train_batch(3, 5, 32);
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{32, 10, 784}));
  ASSERT_EQ(b.targets.sizes(), (std::vector<int64_t>{32}));
  // undo the normalisation to recover each element's bytes
  const torch::Tensor bytes =
      ((b.inputs * 0.3530f + 0.2860f) * 255.0f).round().clamp(0, 255).to(torch::kUInt8);
  for (int64_t s = 0; s < 32; ++s) {
    std::map<int64_t, int> classes;
    int64_t odd_class = -1;
    for (int64_t e = 0; e < 10; ++e) {
      const torch::Tensor img = bytes[s][e].contiguous();
      const auto it =
          label_of.find(std::string(reinterpret_cast<const char*>(img.data_ptr<uint8_t>()), 784));
      ASSERT_NE(it, label_of.end()) << "set " << s << " element " << e << " is no training image";
      const int64_t label = *it->second.begin();
      if (e == b.targets[s].item<int64_t>()) {
        odd_class = label;
      } else {
        ++classes[label];
      }
    }
    ASSERT_EQ(classes.size(), 1u) << "set " << s << ": the nine share one class";
    EXPECT_NE(classes.begin()->first, odd_class) << "set " << s;
  }
  // batches are functions of (seed, step); held-out sets are the same for every seed
  EXPECT_TRUE(torch::equal(task->train_batch(3, 5, 32).inputs, b.inputs));
  EXPECT_FALSE(torch::equal(task->train_batch(3, 6, 32).targets, b.targets) &&
               torch::equal(task->train_batch(3, 6, 32).inputs, b.inputs));
  EXPECT_TRUE(
      torch::equal(task->eval_batches(0, 16)[1].inputs, task->eval_batches(9, 16)[1].inputs));
}

TEST(FashionMnistTaskTest, ImagesAreNormalisedAndLabelled) {
  REQUIRE_FASHION_MNIST();
  const auto task = make_task({"fashion-mnist", 1, 100, ""});
  const Batch b = task->train_batch(0, 0, 8);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{8, 1, 28, 28}));
  EXPECT_EQ(b.targets.sizes(), (std::vector<int64_t>{8}));
  const auto eval = task->eval_batches(0, 64);
  ASSERT_EQ(eval.size(), 2u);  // 100 held-out images in batches of 64
  EXPECT_EQ(eval[1].targets.size(0), 36);
  ModelShape s;
  task->configure_model(s);
  EXPECT_EQ(s.patch_size, 4);
  EXPECT_EQ(s.n_classes, 10);
}

}  // namespace
}  // namespace kvlab::data
