#pragma once

// Entry points built for AVX-512, AVX2 + FMA and the baseline, the best picked at load time:
// for plain loops the compiler vectorises (no intrinsics, so no reference twin of their own).
#define KVLAB_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
