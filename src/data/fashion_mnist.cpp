#include "data/fashion_mnist.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>
#include <memory>

#include "io/idx.h"
#include "spec/spec_error.h"

namespace kvlab::data {
namespace {

// The whole decompressed content of a .gz file (or of a plain file: zlib passes it through).
std::string read_gzip(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    throw SpecError("data", path + " is not a regular file (a gzipped IDX file is expected)");
  }
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    throw SpecError("data", "cannot open " + path +
                                " (Fashion-MNIST comes from Debian's dataset-fashion-mnist: "
                                "scripts/install-deps installs it)");
  }
  std::string out;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(file.get(), buffer, sizeof buffer)) > 0) {
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > (size_t{1} << 30)) throw SpecError("data", path + ": more than 1 GiB");
  }
  if (n < 0) throw SpecError("data", path + ": corrupt gzip stream");
  return out;
}

}  // namespace

ImageSet load_fashion_mnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k") {
    throw SpecError("data", "unknown Fashion-MNIST split '" + split + "' (train | t10k)");
  }
  const std::string image_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string label_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  const std::string images = read_gzip(image_path);
  const std::string labels = read_gzip(label_path);
  const std::vector<int64_t> image_shape = parse_idx_header(images, 3, image_path);
  const std::vector<int64_t> label_shape = parse_idx_header(labels, 1, label_path);
  if (image_shape[1] != 28 || image_shape[2] != 28) {
    throw SpecError("data", image_path + ": images are " + std::to_string(image_shape[1]) + "×" +
                                std::to_string(image_shape[2]) + ", expected 28×28");
  }
  const int64_t n = image_shape[0];
  const int64_t expected = split == "train" ? 60000 : 10000;
  if (n != expected || label_shape[0] != n) {
    throw SpecError("data", image_path + ": " + std::to_string(n) + " images and " +
                                std::to_string(label_shape[0]) + " labels, expected " +
                                std::to_string(expected) + " of each");
  }
  ImageSet set;
  set.images = torch::empty({n, 28, 28}, torch::kUInt8);
  std::memcpy(set.images.data_ptr<uint8_t>(), images.data() + 16, static_cast<size_t>(n * 784));
  set.labels = torch::empty({n}, torch::kInt64);
  auto l = set.labels.accessor<int64_t, 1>();
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<unsigned char>(labels[static_cast<size_t>(8 + i)]);
    if (label > 9) {
      throw SpecError("data", label_path + ": label " + std::to_string(label) + " at " +
                                  std::to_string(i) + " is outside 0..9");
    }
    l[i] = label;
  }
  return set;
}

}  // namespace kvlab::data
