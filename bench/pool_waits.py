#!/usr/bin/env python3
"""Where the decode step's threads go, from a sampled profile: each thread's samples inside the
step split into the kernels' own work and its waits on the pool (the caller in ThreadPool::run for
the last items of a job, a worker in ThreadPool::work for the next job), the caller's waits by the
product that was running. This VM has no performance counters, so the clock samples
(`-e cpu-clock`) are what there is, and they can go missing on one thread: on the Zen 5 VM they put
a fifth of the caller's step on waiting where in-process clocks measured 6-8% (docs/kernels/
dense-decode.md, twenty-second session). Check a large wait against clocks before acting on it. Not part of the build or the tests; after `make build`:

  perf record -e cpu-clock -F 2000 --call-graph dwarf,32768 -o /tmp/step.data -- \\
      build/bin/kvlab bench generate --attn gqa:4 --layers 16 --d-model 1024 --heads 16 \\
      --threads 2 --prompt 8 --generate 200 --repeats 1 --long-prompt 0 --weight-dtype q8_0 \\
      --batch 1
  perf script -i /tmp/step.data -F tid,ip,sym > /tmp/step.txt
  bench/pool_waits.py /tmp/step.txt

The caller is the thread with the most samples; only its samples under DecodeModel::step count,
and only the other threads' under ThreadPool::work (their prefill share included). perf's DWARF
unwinding sometimes loses the caller's stacks for a whole run (a handful of samples under
DecodeModel::step): record again.
"""
import collections
import sys


def read_samples(path):
    samples, current = [], None
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            text = line.strip()
            if not text:
                continue
            if text.isdigit():  # a sample's thread id; its frames follow, innermost first
                current = (text, [])
                samples.append(current)
            elif current is not None:
                parts = text.split(None, 1)
                name = parts[1] if len(parts) > 1 else "?"
                name = name.replace("(anonymous namespace)", "{anonymous}")
                current[1].append(name.split("(")[0])
    return samples


def classify(frames, caller):
    leaf = frames[0]
    if leaf in ("kvlab::ThreadPool::run", "kvlab::ThreadPool::work"):
        if not caller:
            return "waiting for a job"
        product = next((f for f in frames[1:] if "matvec" in f or "decode_attention" in f), "")
        product = product or next((f for f in frames[1:] if "FastDecoder::run" in f), "")
        block = "mlp" if any("DecodeModel::mlp" in f for f in frames) else "attention block"
        return f"waiting for the other thread: {product or 'a product the stack does not name'} ({block})"
    if any("walk_rows" in f or "panel_range" in f or "rows_range" in f for f in frames[:3]):
        return "dense tiles"
    return leaf


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: pool_waits.py PERF_SCRIPT_OUTPUT (perf script -F tid,ip,sym)")
    samples = read_samples(sys.argv[1])
    if not samples:
        sys.exit(f"pool_waits.py: no samples in {sys.argv[1]}")
    threads = collections.Counter(tid for tid, _ in samples)
    caller = threads.most_common(1)[0][0]
    for tid, _ in threads.most_common(len(threads)):
        is_caller = tid == caller
        inside = "DecodeModel::step" if is_caller else "ThreadPool::work"
        shares = collections.Counter()
        for sample_tid, frames in samples:
            if sample_tid == tid and any(inside in f for f in frames):
                shares[classify(frames, is_caller)] += 1
        total = sum(shares.values())
        if total == 0:
            continue
        print(f"thread {tid} ({'caller' if is_caller else 'worker'}): {total} samples")
        for what, count in shares.most_common(12):
            print(f"  {100.0 * count / total:6.2f}%  {what}")


if __name__ == "__main__":
    main()
