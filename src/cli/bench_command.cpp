#include "cli/bench_command.h"

#include <string>

namespace kvlab {

BenchCommands add_bench_commands(CLI::App& app, BenchTrainOptions& o, BenchMemoryOptions& m,
                                 BenchComputeOptions& c, BenchDecodeOptions& d,
                                 BenchModelOptions& b) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (speed, reported with medians)");
  bench->require_subcommand(1);
  CLI::App* train = bench->add_subcommand(
      "train", "Training tokens/s of a small GPT: forward + backward + AdamW per step");
  train->add_option("--attn", o.attn, "Attention spec")->capture_default_str();
  train->add_option("--d-model", o.d_model, "Model width")->capture_default_str();
  train->add_option("--layers", o.layers, "Layers")->capture_default_str();
  train->add_option("--heads", o.heads, "Heads")->capture_default_str();
  train->add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str();
  train->add_option("--batch", o.batch, "Sequences per step")->capture_default_str();
  train->add_option("--threads", o.threads, "Threads (libtorch and OpenBLAS)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  train->add_option("--steps", o.steps, "Timed steps")->capture_default_str();
  train->add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  train->add_flag("--composed-attention", o.composed_attention,
                  "Attention from libtorch's composed ops (matmul, masked softmax, matmul), the "
                  "reference, instead of the fused causal kernel");
  train
      ->add_option("--matmul-precision", o.matmul_precision,
                   "The linears' products: f32, or bf16 operands with f32 sums and outputs "
                   "(CPUs with AVX-512 BF16 or AMX)")
      ->capture_default_str();
  train->add_flag("--profile", o.profile,
                  "After the timed steps, one more under libtorch's profiler: time per phase "
                  "(forward, loss, backward, optimizer) and the operators with the most self "
                  "time (not in the medians: the profiler adds ~1 us an op)");
  train->add_flag("--compare-pytorch", o.compare_pytorch,
                  "Time the same model and steps in PyTorch eager too (bench/pytorch_train.py "
                  "under python3; Debian: python3-torch), alternating with kvlab, and print "
                  "kvlab ÷ PyTorch per round and the median (mha only)");
  train->add_option("--pytorch-script", o.pytorch_script,
                    "The PyTorch twin to run (default: the source tree's bench/pytorch_train.py)");
  train
      ->add_option("--python", o.python,
                   "The Python interpreter for the twin (Debian's python3-torch installs into "
                   "/usr/bin/python3)")
      ->capture_default_str();
  train->add_option("--rounds", o.rounds, "Alternating kvlab/PyTorch rounds (--compare-pytorch)")
      ->capture_default_str();
  train->add_option("--format", o.format, "table | json")->capture_default_str();
  CLI::App* memory = bench->add_subcommand(
      "memory", "Streaming read bandwidth (all threads, median of repeats): the decode ceiling");
  memory->add_option("--mib", m.mib, "Buffer size in MiB (>= 1024 to defeat the caches)")
      ->capture_default_str();
  memory->add_option("--threads", m.threads, "Reader threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  memory->add_option("--repeats", m.repeats, "Timed passes after one warm-up")
      ->capture_default_str();
  memory
      ->add_option("--streams", m.streams,
                   "Parts of its slice each thread reads side by side: 1, 2, 4 or 8 (1: one "
                   "contiguous read), or 0: the fastest of 1, 4, and 4 with each line "
                   "prefetched " +
                       std::to_string(kProbeAheadBytes) +
                       " B ahead (as the dense kernels read their weights), the ceiling the "
                       "decode benchmarks use")
      ->capture_default_str();
  memory->add_option("--format", m.format, "table | json")->capture_default_str();
  CLI::App* compute = bench->add_subcommand(
      "compute",
      "Peak multiply-add rate per precision (f32 FMA, bf16 and int8 dot products; all threads, "
      "register loops, median of repeats): the compute side of bench decode's roofline. Where "
      "AMX runs, also AMX int8 blocks and 'bf16 tiles loaded': the tile loop with its operands "
      "loaded from L1, the rate a tile product can reach now (some VMs cut it at times)");
  compute->add_option("--threads", c.threads, "Threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  compute->add_option("--repeats", c.repeats, "Timed passes after one warm-up")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  compute->add_option("--format", c.format, "table | json")->capture_default_str();
  CLI::App* decode = bench->add_subcommand(
      "decode",
      "Decode attention of one layer at one step: time, bytes, GB/s and the fraction of the "
      "read bandwidth; every row and a 1 GiB bandwidth probe are timed in interleaved rounds "
      "(medians), so load drift on a shared machine moves them together; each timed step "
      "follows an untimed step over the row's previous layer, as in a decode. Each row gets its "
      "roofline (bytes at the bandwidth, multiply-adds at the compute peak of its precision, "
      "both measured in the rounds) and its kernel's compute alone on the same threads (rows "
      "in L2), timed in the rounds too: a step near the larger of memory us and kernel compute "
      "us is as fast as this kernel gets here");
  decode->add_option("--attn", d.attn, "Attention spec, repeatable (one- and two-stream variants)")
      ->required();
  decode->add_option("--heads", d.heads, "Query heads")->capture_default_str();
  decode->add_option("--head-dim", d.head_dim, "Head width")->capture_default_str();
  decode->add_option("--context", d.context, "Cached tokens, comma list (k = 1024)")
      ->delimiter(',')
      ->capture_default_str();
  decode->add_option("--batch", d.batch, "Sequences")->capture_default_str();
  decode
      ->add_option("--dtype", d.dtype,
                   "Cache dtypes, comma list: f32 | bf16 | f16 | q8_0 | q4_0 (q8_0/q4_0 rows run "
                   "the int8 kernel: --attn-precision int8 or auto)")
      ->delimiter(',')
      ->capture_default_str();
  decode
      ->add_option("--attn-precision", d.precision,
                   "Arithmetic of the score and value passes, comma list: f32 (exact to f32 "
                   "sums), bf16 (bf16 queries and weights, vdpbf16ps; needs AVX-512 BF16), int8 "
                   "(q8_0/q4_0 caches: the query rounded to q8_0, integer dot products), auto "
                   "(int8 on q8_0/q4_0 caches, else bf16 where the CPU has it, else f32). Each "
                   "precision makes rows for the caches it reads; rows whose keys are not read as "
                   "cached (RoPE on read, rebuilt keys) or whose cache is not bf16 compute in f32; "
                   "the precision column says which ran")
      ->delimiter(',')
      ->capture_default_str();
  decode
      ->add_option("--key-order", d.key_order,
                   "Order of the key stream in the cache pages, comma list: rows (each key row "
                   "contiguous), pairs (element pairs of 16 tokens in one 64-byte vector: the "
                   "score pass puts tokens in lanes and needs no horizontal sums; rows for "
                   "two-stream variants over bf16 caches only), auto (pairs where a cache takes "
                   "them, except on AMX, whose tiles read key rows; else rows)")
      ->delimiter(',')
      ->capture_default_str();
  decode->add_option("--threads", d.threads, "Threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  decode->add_option("--repeats", d.repeats, "Timed rounds after 3 warm-up rounds")
      ->capture_default_str();
  decode
      ->add_option("--rotate-mib", d.rotate_mib,
                   "Every row rotates over the same number of layers' caches (at least 3), "
                   "enough that all rows' together hold this many MiB (defeats the LLC)")
      ->capture_default_str();
  decode->add_option("--format", d.format, "table | json")->capture_default_str();
  auto model_flags = [&b](CLI::App* cmd) {
    cmd->add_option("--attn", b.attn, "Attention spec, repeatable");
    cmd->add_option("--layers", b.layers, "Layers")->capture_default_str();
    cmd->add_option("--d-model", b.d_model, "Model width")->capture_default_str();
    cmd->add_option("--heads", b.heads, "Heads")->capture_default_str();
    cmd->add_option("--threads", b.threads, "Threads (0: all cores)")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    cmd->add_option("--format", b.format, "table | json")->capture_default_str();
  };
  CLI::App* prefill = bench->add_subcommand(
      "prefill", "Forward-pass tokens/s and peak memory per batch × length (seed 003 Table 14)");
  model_flags(prefill);
  prefill->add_option("--batch", b.batch, "Batch sizes")->delimiter(',')->capture_default_str();
  prefill->add_option("--length", b.length, "Sequence lengths")
      ->delimiter(',')
      ->capture_default_str();
  CLI::App* generate = bench->add_subcommand(
      "generate", "End-to-end generation tokens/s through the paged cache (seed 003 Table 15)");
  model_flags(generate);
  generate->add_option("--checkpoint", b.checkpoints,
                       "A trained model to time (a run, a converted checkpoint, a Hugging Face "
                       "folder), repeatable; its own shape, not --layers/--d-model/--heads");
  generate->add_option("--prompt", b.prompt, "Prompt tokens")->capture_default_str();
  generate->add_option("--generate", b.generate, "Generated tokens")->capture_default_str();
  generate->add_option("--long-prompt", b.long_prompt, "Prompt of the long-context row (0: none)")
      ->capture_default_str();
  generate->add_flag("--ragged", b.ragged,
                     "Give sequence s of a batch a prompt of P − (s mod ⌈P/2⌉) tokens (P: the "
                     "row's prompt), so the batch decodes at different positions, as a server's "
                     "does");
  generate
      ->add_option("--cache-dtype", b.cache_dtype,
                   "f32 | bf16 | f16 | q8_0 | q4_0 | fp8 (q8_0/q4_0 decode in int8 with "
                   "--attn-precision auto or int8; fp8 with the scalar reference)")
      ->capture_default_str();
  generate
      ->add_option("--weight-dtype", b.weight_dtypes,
                   "The decode step's dense-layer matrices, a row each: comma list of f32 | bf16 | "
                   "f16 | q8_0 | q4_0 | auto (bf16 where the decoder has SIMD kernels)")
      ->delimiter(',')
      ->capture_default_str();
  generate
      ->add_option("--batch", b.decode_batch,
                   "Sequences decoded together in one step, a row each (comma list, e.g. "
                   "1,4,16,64): the weights are read once a step for all of them. Each row's "
                   "tokens/s is also given against the first batch size's, in the same rounds")
      ->delimiter(',')
      ->capture_default_str();
  generate
      ->add_option("--repeats", b.repeats,
                   "Timed generations per row after one warm-up, in rounds: each round runs "
                   "every --batch size once, in turn")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  generate
      ->add_option("--attn-precision", b.precision,
                   "Attention arithmetic of the decode step: f32, bf16 (needs AVX-512 BF16) or "
                   "auto (bf16 where the CPU has it)")
      ->capture_default_str();
  generate
      ->add_option("--key-order", b.key_order,
                   "Order of the cache's key stream: auto (pairs for two-stream bf16 caches "
                   "except on AMX, whose tiles read rows), rows, or pairs (where the cache "
                   "takes it: two-stream bf16; rows elsewhere)")
      ->capture_default_str();
  return {train, memory, compute, decode, prefill, generate};
}

}  // namespace kvlab
