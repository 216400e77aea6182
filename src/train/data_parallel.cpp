#include "train/data_parallel.h"

#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "spec/spec_error.h"

namespace kvlab::train {
namespace {

int env_int(const char* name, int low, int high, std::optional<int> fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    if (fallback) return *fallback;
    throw SpecError(name, std::string("is not set (a data-parallel run needs RANK, WORLD_SIZE, "
                                      "MASTER_ADDR and MASTER_PORT)"));
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < low || value > high) {
    throw SpecError(name, "'" + std::string(text) + "' is not an integer in [" +
                              std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return static_cast<int>(value);
}

}  // namespace

std::optional<DistributedEnv> DistributedEnv::from_environment() {
  if (std::getenv("WORLD_SIZE") == nullptr) return std::nullopt;
  DistributedEnv env;
  env.world_size = env_int("WORLD_SIZE", 1, 1 << 16, std::nullopt);
  env.rank = env_int("RANK", 0, env.world_size - 1, std::nullopt);
  env.local_rank = env_int("LOCAL_RANK", 0, 1 << 16, env.rank);
  const char* addr = std::getenv("MASTER_ADDR");
  if (env.world_size > 1 && (addr == nullptr || *addr == '\0')) {
    throw SpecError("MASTER_ADDR", "is not set (the address of rank 0's machine)");
  }
  if (addr != nullptr && *addr != '\0') env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT", 1, 65535,
                            env.world_size > 1 ? std::nullopt : std::optional<int>(29500));
  env.timeout = std::chrono::seconds(env_int("KVLAB_DIST_TIMEOUT_S", 1, 86400, 120));
  return env;
}

struct DataParallel::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

namespace {

// Runs one collective and waits for it, turning every failure into one clear error.
template <typename F>
void collective(const DistributedEnv& env, const char* what, F&& start) {
  try {
    start()->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(
        "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": " + what +
        " failed (another rank stopped, the network failed, or " +
        std::to_string(env.timeout.count()) + " s passed — KVLAB_DIST_TIMEOUT_S): " + e.what());
  }
}

}  // namespace

DataParallel::DataParallel(const DistributedEnv& env) : env_(env), impl_(std::make_unique<Impl>()) {
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(env.timeout);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
    if (interface != nullptr && *interface != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost") {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    options->threads = 2;
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("kvlab", impl_->store), env.rank, env.world_size,
        options);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + " of " +
                             std::to_string(env.world_size) + ": rendezvous at " + env.master_addr +
                             ":" + std::to_string(env.master_port) + " failed within " +
                             std::to_string(env.timeout.count()) + " s: " + e.what());
  }
}

DataParallel::~DataParallel() = default;

void DataParallel::broadcast(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& t : tensors) {
    std::vector<torch::Tensor> one = {t.detach()};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    collective(env_, "broadcast", [&] { return impl_->group->broadcast(one, options); });
  }
}

void DataParallel::average_gradients(const std::vector<torch::Tensor>& params,
                                     int64_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  size_t first = 0;
  while (first < params.size()) {
    // one bucket: consecutive parameters up to bucket_bytes (at least one)
    size_t last = first;
    int64_t bytes = 0;
    std::vector<torch::Tensor> grads;
    while (last < params.size() && (grads.empty() || bytes < bucket_bytes)) {
      torch::Tensor p = params[last];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad());
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
      ++last;
    }
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& g : grads) flat.push_back(g.reshape({-1}));
    std::vector<torch::Tensor> bucket = {torch::cat(flat)};
    collective(env_, "gradient all-reduce", [&] { return impl_->group->allreduce(bucket); });
    bucket[0].div_(static_cast<double>(env_.world_size));
    int64_t offset = 0;
    for (torch::Tensor& g : grads) {
      g.copy_(bucket[0].narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
    first = last;
  }
}

std::vector<double> DataParallel::sum(const std::vector<double>& values) {
  std::vector<torch::Tensor> t = {
      torch::tensor(values, torch::TensorOptions().dtype(torch::kFloat64))};
  collective(env_, "all-reduce", [&] { return impl_->group->allreduce(t); });
  const double* p = t[0].data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

std::unique_ptr<DataParallel> data_parallel_from_environment() {
  const std::optional<DistributedEnv> env = DistributedEnv::from_environment();
  if (!env || env->world_size == 1) return nullptr;
  return std::make_unique<DataParallel>(*env);
}

void DataParallel::barrier() {
  collective(env_, "barrier", [&] { return impl_->group->barrier(); });
}

}  // namespace kvlab::train
