#!/bin/sh
# One dense kernel as it was at a git revision against the working tree's, in one process: FILE
# (a kernel source under src/kernels) is compiled twice with its flags from the build's
# compile_commands.json, once from REV's source tree and once from the working tree, FUNCTION
# renamed FUNCTION_old and FUNCTION_new; bench/dense_step_shapes.cpp's --ab mode then calls the two
# alternately, step by step (old new new old, …), over the d 1024 × 16 model's matrices (weights
# of DTYPE in the order the decoder stores them on this CPU; KVLAB_CPU_ISA picks another ISA's,
# e.g. avx2 for rows) and prints each one's median step and old ÷ new. Both builds link
# against the working tree's library, so the types they share (MatVecParams, ThreadPool,
# MatVecScratch) must not have changed since REV. After `make build`:
#   bench/kernel_ab.sh REV FILE FUNCTION THREADS DTYPE
#   e.g. bench/kernel_ab.sh HEAD~1 src/kernels/matvec_amx_quant_panels.cpp \
#        matvec_amx_quant_panels 2 q8_0
# With REV = HEAD and no change to FILE it times a kernel against itself: its ratios' spread is the
# harness's own (docs/kernels/dense-decode.md).
# KVLAB_AB_ROWS picks the rows of x (dense_step_shapes.cpp's header); KVLAB_AB_FLAGS adds compiler
# flags to both builds, e.g. KVLAB_AB_FLAGS='-DAHEAD=8192' to try a value the working tree's source
# takes from a macro (REV's source, without that macro, builds as it was).
set -eu
if [ $# -ne 5 ]; then
  echo "usage: $0 REV FILE FUNCTION THREADS DTYPE (bf16 | q8_0 | q4_0)" >&2
  exit 2
fi
rev=$1 file=$2 function=$3 threads=$4 dtype=$5
build=build
[ -f "$build/compile_commands.json" ] || { echo "$0: no $build/compile_commands.json (make build)" >&2; exit 2; }
[ -f "$file" ] || { echo "$0: no such file: $file" >&2; exit 2; }
git rev-parse --verify --quiet "$rev^{commit}" > /dev/null || { echo "$0: not a revision: $rev" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive "$rev" src | tar -x -C "$work"
[ -f "$work/$file" ] || { echo "$0: $file is not in $rev" >&2; exit 2; }
# the file's ISA flags (-m…) as the build compiles it
flags=$(python3 -c '
import json, sys
for entry in json.load(open(sys.argv[1])):
    if entry["file"].endswith("/" + sys.argv[2]):
        print(" ".join(a for a in entry["command"].split() if a.startswith("-m")))
        break
' "$build/compile_commands.json" "$file")
common="${KVLAB_AB_FLAGS:-} -O3 -std=c++20 -DNDEBUG -I$build/src/generated $flags"
# shellcheck disable=SC2086
g++ $common -I"$work/src" -D"$function=${function}_old" -c "$work/$file" -o "$work/old.o"
# shellcheck disable=SC2086
g++ $common -Isrc -D"$function=${function}_new" -c "$file" -o "$work/new.o"
g++ -O2 -std=c++20 -I. -Isrc -DKVLAB_AB_A="${function}_old" -DKVLAB_AB_B="${function}_new" \
  bench/dense_step_shapes.cpp "$work/old.o" "$work/new.o" "$build/src/libkvlab_kernels.a" \
  "$build/src/libkvlab_spec.a" "$build/src/libkvlab_report.a" -ldnnl -lfmt -lpthread \
  -o "$work/ab"
"$work/ab" "$threads" "$dtype" --ab
