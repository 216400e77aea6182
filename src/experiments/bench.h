#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/memory_bandwidth.h"

namespace kvlab {

// `kvlab bench train`: tokens/s of full training steps (forward, backward, AdamW) of a
// small byte-level GPT on random tokens; median and spread over steps after warm-up.
struct BenchTrainOptions {
  std::string attn = "mha";
  int64_t d_model = 128, layers = 4, heads = 4, seq_len = 128, batch = 32;
  int threads = 1;
  int64_t steps = 10;
  int64_t warmup = 3;
  bool profile = false;  // one more step under libtorch's profiler: time per phase and per op
  bool composed_attention = false;       // libtorch's composed ops instead of the fused kernel
  std::string matmul_precision = "f32";  // the linears' products: f32 | bf16
  // The same model and steps in PyTorch eager (bench/pytorch_train.py under python3),
  // alternating with kvlab for `rounds` rounds.
  bool compare_pytorch = false;
  std::string pytorch_script;               // empty: the source tree's bench/pytorch_train.py
  std::string python = "/usr/bin/python3";  // Debian's, where python3-torch installs
  int rounds = 3;
  std::string format = "table";
};

// `kvlab bench memory`: this machine's streaming read bandwidth, the ceiling of decode.
struct BenchMemoryOptions {
  int64_t mib = 1024;  // buffer size
  int threads = 0;     // 0: all cores
  int repeats = 7;
  int streams = kCeilingStreams;  // parts each thread reads side by side (0: the ceiling)
  std::string format = "table";
};

// `kvlab bench compute`: this CPU's peak multiply-add rate per precision, the compute side of
// the roofline (bench memory is the other).
struct BenchComputeOptions {
  int threads = 0;  // 0: all cores
  int repeats = 7;
  std::string format = "table";
};

// `kvlab bench decode`: one layer's decode attention at one step, over caches rotated across
// enough layers to exceed the last-level cache, against the bandwidth measured in the same run.
struct BenchDecodeOptions {
  std::vector<std::string> attn;
  int64_t heads = 32;
  int64_t head_dim = 128;
  std::vector<std::string> context = {"16k"};
  int64_t batch = 1;
  std::vector<std::string> dtype = {"bf16"};  // cache dtypes: rows for each
  // "auto": int8 on q8_0/q4_0 caches; elsewhere bf16 where the CPU has AVX-512 BF16, else f32
  std::vector<std::string> precision = {"auto"};
  // key orders (spec/key_order.h): auto (fastest_key_order), rows, pairs (rows for two-stream
  // variants over bf16 caches only)
  std::vector<std::string> key_order = {"auto"};
  int threads = 0;
  int repeats = 20;
  int64_t rotate_mib = 1024;  // caches rotated over at least this many bytes
  std::string format = "table";
};

// `kvlab bench prefill` (forward tokens/s and peak memory per batch × length, seed 003
// Table 14's shape) and `kvlab bench generate` (end-to-end decode tokens/s: prompt 128,
// generate 128, seed 003 Table 15's shape, plus a long-context row).
struct BenchModelOptions {
  std::vector<std::string> attn;
  // generate: trained models (kvlab runs, converted checkpoints, Hugging Face folders) timed
  // instead of, or beside, the random-weight models of --attn
  std::vector<std::string> checkpoints;
  int64_t layers = 4, d_model = 256, heads = 8;
  std::vector<int64_t> batch = {1, 4, 16};  // prefill
  std::vector<int64_t> decode_batch = {1};  // generate: sequences decoded in one step
  // generate: the dense layers' weight dtypes (parse_weight_dtype_flag), a row each
  std::vector<std::string> weight_dtypes = {"auto"};
  std::vector<int64_t> length = {1024, 2048};
  int64_t prompt = 128, generate = 128, long_prompt = 2048;
  // generate: sequence s of a batch gets a prompt of prompt − (s mod ⌈prompt/2⌉) tokens, so the
  // batch's new tokens sit at different positions, as a server's do
  bool ragged = false;
  std::string cache_dtype = "bf16";
  int threads = 0;
  int repeats = 5;  // generate: rounds of timed generations (each --batch once) after a warm-up
  std::string precision = "auto";  // generate: attention arithmetic of the decode step
  // generate: the key stream's order, auto (fastest_key_order) | rows | pairs (where the
  // cache takes it; rows elsewhere)
  std::string key_order = "auto";
  std::string format = "table";
};

int run_bench_prefill(const BenchModelOptions& options, std::ostream& out);
int run_bench_generate(const BenchModelOptions& options, std::ostream& out);
int run_bench_decode(const BenchDecodeOptions& options, std::ostream& out);
int run_bench_memory(const BenchMemoryOptions& options, std::ostream& out);
int run_bench_compute(const BenchComputeOptions& options, std::ostream& out);
int run_bench_train(const BenchTrainOptions& options, std::ostream& out);

}  // namespace kvlab
