#pragma once

namespace kvlab::nn {

// Sets both thread pools explicitly: libtorch's intra-op OpenMP pool and OpenBLAS's own
// (torch::set_num_threads does not bound OpenBLAS). threads <= 0 means all cores. Returns the
// count set.
int set_threads(int threads);

}  // namespace kvlab::nn
