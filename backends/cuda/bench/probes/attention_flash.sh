#!/usr/bin/env bash
# Probe (scripts/gpu, GPU_PROBE=1): the prefill attention kernel alone (attention_flash_harness.cu)
# on the 8B prompt's shape, the kernel as it is against an earlier copy beside this script
# (attention_flash_before.cu, when present: an edit's A/B in one call), and three variants
# that leave part of the work out (wrong results, times only): without its tensor cores
# (LK_FLASH_PROBE_NO_MMA), with the causal mask from indices instead of loads
# (LK_FLASH_PROBE_CAUSAL), without pass 1 (LK_FLASH_PROBE_ONE_PASS). Arguments: the build
# folder and nvcc. Prints JSON lines. The earlier copy is untracked, made for the A/B, e.g.
#   git show 993a44a:backends/cuda/kernels/attention_flash.cu > backends/cuda/bench/probes/attention_flash_before.cu
set -uo pipefail
BUILD=$1 NVCC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
KERNELS=$HERE/../../kernels
WORK=$BUILD/probes/attention_flash
rm -rf "$WORK" && mkdir -p "$WORK"
build() {  # name, extra nvcc flags
  "$NVCC" -O3 -arch=sm_90 -std=c++17 -I "$KERNELS" "${@:2}" -o "$WORK/$1" "$HERE/attention_flash_harness.cu" >"$WORK/$1.log" 2>&1 ||
    { cat "$WORK/$1.log" >&2; return 1; }
}
names=(now no_mma causal_from_indices pass2_only)
build now & build no_mma -DLK_FLASH_PROBE_NO_MMA & build causal_from_indices -DLK_FLASH_PROBE_CAUSAL &
build pass2_only -DLK_FLASH_PROBE_ONE_PASS &
if [[ -f $HERE/attention_flash_before.cu ]]; then
  names=(before "${names[@]}")
  build before "-DFLASH_FILE=\"$HERE/attention_flash_before.cu\"" &
fi
wait
for shape in "8 4 512" "2 3 100"; do
  for mask in inf finite; do
    base=$WORK/base_${mask}_${shape// /_}.bin
    "$WORK/${names[0]}" "${names[0]}" $mask $shape save "$base"
    for name in "${names[@]:1}"; do "$WORK/$name" "$name" $mask $shape compare "$base"; done
    # the first again, after the others: the spread between its two runs
    "$WORK/${names[0]}" "${names[0]}-again" $mask $shape compare "$base"
  done
done
