#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvlab::train {

// Where this process sits in a data-parallel job, from the variables torchrun and SLURM
// launchers set: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. KVLAB_DIST_TIMEOUT_S
// bounds every rendezvous and collective (default 120 s).
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout{120};

  // nullopt when WORLD_SIZE is not set. Throws SpecError naming the variable that is
  // missing or out of range.
  static std::optional<DistributedEnv> from_environment();
};

// Data parallelism over PyTorch's own c10d: rendezvous through a TCPStore hosted by rank 0,
// collectives through ProcessGroupGloo (CPU tensors). Every collective failure — a rank that
// died, a network error, the timeout — is thrown as std::runtime_error naming this rank.
class DataParallel {
 public:
  explicit DataParallel(const DistributedEnv& env);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistributedEnv& env() const { return env_; }

  // Every rank takes rank 0's values.
  void broadcast(const std::vector<torch::Tensor>& tensors);
  // Gradients of `params` summed over ranks and divided by the world size, in buckets of about
  // bucket_bytes (one flat allreduce each: few large messages, not one per tensor). A
  // parameter without a gradient contributes zeros.
  void average_gradients(const std::vector<torch::Tensor>& params,
                         int64_t bucket_bytes = int64_t{25} << 20);
  // Element-wise sum of a few numbers over ranks (loss, stop flags).
  std::vector<double> sum(const std::vector<double>& values);
  void barrier();

 private:
  struct Impl;
  DistributedEnv env_;
  std::unique_ptr<Impl> impl_;
};

// The job this process belongs to, from the environment: nullptr when WORLD_SIZE is unset or
// 1 (a single process needs no collectives).
std::unique_ptr<DataParallel> data_parallel_from_environment();

}  // namespace kvlab::train
