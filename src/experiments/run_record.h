#pragma once

#include <nlohmann/json.hpp>

namespace kvlab {

// Where a result was made, as every record of kvlab's experiments carries it.
// {"version": "0.1.0", "commit": "69dbd5a1b2c3"}: the commit is the one the build was configured
// from ("unknown" outside a git checkout).
nlohmann::json build_record();

// {"cpu": "AMD EPYC (family 25, model 1)", "cores": 2, "kernel_isa": "avx2",
//  "avx512_bf16": false}: the decode kernels' ISA as they pick it here (KVLAB_CPU_ISA applies).
nlohmann::json machine_record();

}  // namespace kvlab
