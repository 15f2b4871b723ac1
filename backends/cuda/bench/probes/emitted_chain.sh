#!/usr/bin/env bash
# Probe (scripts/gpu, GPU_PROBE=1): case 2's chain as luminal emits it, against edits of
# the same source, each timed by emitted_chain_harness.cu. Arguments: the build folder
# (elementwise_cuda built there) and nvcc. Prints JSON lines.
set -uo pipefail
BUILD=$1 NVCC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$BUILD/probes/emitted
rm -rf "$WORK" && mkdir -p "$WORK/dump"
LUMINAL_KERNEL_DUMP=$WORK/dump LUMINAL_CACHE_DIR=$WORK/cache LUMINAL_PROGRAM_CACHE=0 \
  "$BUILD/backends/cuda/elementwise_cuda" --search-s 2 --runs 3 >"$WORK/bench.json" || { cat "$WORK/bench.json"; exit 1; }
# The chain's kernel: the dumped unit whose kernel takes three inputs and loops over 16-byte chunks.
src=$(grep -l "LM_COPY16(&lm_x2" "$WORK"/dump/lm_*.cu | head -1)
[[ -n $src ]] || { echo "emitted_chain.sh: no vectorized chain kernel among the dumped sources" >&2; exit 1; }
# A unit holds several kernels: the first with three BF16 inputs becomes `emitted_chain`.
sed -E '0,/void lm_[0-9a-f]+\(const unsigned short\* __restrict__ in0, const unsigned short\* __restrict__ in1, const unsigned short\* __restrict__ in2, unsigned short\*/s//void emitted_chain(const unsigned short* __restrict__ in0, const unsigned short* __restrict__ in1, const unsigned short* __restrict__ in2, unsigned short*/' "$src" >"$WORK/emitted.cu"
grep -q "void emitted_chain(" "$WORK/emitted.cu" || { echo "emitted_chain.sh: no three-input kernel in $src" >&2; exit 1; }
# Variants: each one edit of the emitted text.
sed 's/  if ((u \& 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);//' "$WORK/emitted.cu" >"$WORK/no_nan_check.cu"
sed 's/^#define LM_GRID_ENTER() asm volatile.*$/#define LM_GRID_ENTER()/' "$WORK/emitted.cu" >"$WORK/no_grid_enter.cu"
sed 's|LM_FN float lm_recip(float a) { return 1.0f / a; }|LM_FN float lm_recip(float a) { return __fdividef(1.0f, a); }|' "$WORK/emitted.cu" >"$WORK/approx_recip.cu"
sed 's/const float v[0-9]* = lm_round_bf16(\(.*\));$/&/' "$WORK/emitted.cu" >/dev/null
sed 's|LM_FN float lm_recip(float a) { return 1.0f / a; }|LM_FN float lm_recip(float a) { return __fdividef(1.0f, a); }|' "$WORK/no_nan_check.cu" >"$WORK/no_nan_check_approx_recip.cu"
for variant in emitted no_nan_check no_grid_enter approx_recip no_nan_check_approx_recip; do
  "$NVCC" -O3 -arch=sm_90 -std=c++17 -include "$WORK/$variant.cu" -o "$WORK/$variant" "$HERE/emitted_chain_harness.cu" \
    >>"$WORK/nvcc.log" 2>&1 || { echo "emitted_chain.sh: $variant did not compile" >&2; tail -5 "$WORK/nvcc.log" >&2; continue; }
  "$WORK/$variant" "$variant" --random
done
"$WORK/emitted" emitted --constant
"$WORK/emitted" emitted --random --graph
"$WORK/no_nan_check" no_nan_check --random --graph
python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); print(json.dumps({"probe": "emitted_chain", "variant": "elementwise_cuda", "us": l.get("value"), "single_run_us": l.get("single_run_us")}))' "$WORK/bench.json"
