#pragma once

#include <torch/torch.h>

#include <string>

namespace kvlab::data {

// Fashion-MNIST as Debian's dataset-fashion-mnist installs it: gzipped IDX files in
// /usr/share/datasets/fashion-mnist.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageSet {
  torch::Tensor images;  // [N, 28, 28] uint8
  torch::Tensor labels;  // [N] int64, 0..9
};

// split: "train" (60,000) or "t10k" (10,000). Checks both files' magic numbers, dimensions
// and counts; throws SpecError("data") naming the file and the problem.
ImageSet load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace kvlab::data
