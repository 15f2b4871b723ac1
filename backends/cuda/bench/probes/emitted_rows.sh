#!/usr/bin/env bash
# Probe (scripts/gpu, GPU_PROBE=1): case 2's compiled softmax and RMSNorm (0.37 and 0.76 of
# their floor in session 22) kernel by kernel. elementwise_cuda --op softmax|rmsnorm dumps
# what the search compiled; each block-per-row kernel among them is timed alone
# (emitted_rows_harness.cu) at the runtime's thread count and others, and edits of it:
#   unrolled     blockDim.x replaced by the launch's count and each loop over a thread's
#                chunks of the row given a trip count known at compile time and unrolled,
#                so that its row scratch (softmax's exponentials) lives in registers: as
#                emitted it is a local-memory array (a 512-byte stack frame; 0 so);
#   float_sums   + the double accumulators as float (attribution only: not the contract).
# Arguments: the build folder (elementwise_cuda built there) and nvcc. Prints JSON lines.
set -uo pipefail
BUILD=$1 NVCC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$BUILD/probes/emitted_rows
rm -rf "$WORK" && mkdir -p "$WORK"
for op in softmax rmsnorm; do
  mkdir -p "$WORK/$op/dump"
  LUMINAL_KERNEL_DUMP=$WORK/$op/dump LUMINAL_CACHE_DIR=$WORK/$op/cache LUMINAL_PROGRAM_CACHE=0 \
    "$BUILD/backends/cuda/elementwise_cuda" --op $op --search-s 2 --runs 3 >"$WORK/$op/bench.json" 2>"$WORK/$op/bench.err" ||
    { echo "emitted_rows.sh: elementwise_cuda --op $op failed" >&2; tail -5 "$WORK/$op/bench.err" >&2; continue; }
  python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); print(json.dumps({"probe": "emitted_rows", "variant": sys.argv[2] + "_compiled", "us": l.get("value"), "fraction_of_floor": l.get("fraction_of_floor")}))' "$WORK/$op/bench.json" $op
  # Every dumped block-per-row kernel (a unit may hold several), renamed emitted_row; its
  # number of BF16 inputs goes in a file beside it.
  python3 - "$WORK/$op" <<'PYEOF'
import re, sys, pathlib
work = pathlib.Path(sys.argv[1])
sig = re.compile(r'extern "C" __global__ void (lm_[0-9a-f]+)\(((?:const unsigned short\* __restrict__ in\d, )+)unsigned short\* __restrict__ out')
i = 0
for src in sorted((work / "dump").glob("lm_*.cu")):
    text = src.read_text()
    for m in sig.finditer(text):
        start = m.start()
        body = text[start:text.index("\n}\n", start)]
        if "lm_block_" not in body:
            continue
        i += 1
        out = text[:start] + text[start:].replace(m.group(1), "emitted_row", 1)
        (work / f"k{i}.cu").write_text(out)
        (work / f"k{i}.inputs").write_text(str(m.group(2).count("in")))
PYEOF
  for cu in "$WORK/$op"/k*.cu; do
    [[ -f $cu ]] || { echo "emitted_rows.sh: no block-per-row kernel in the $op dump" >&2; break; }
    k=${cu%.cu}
    inputs=$(cat "$k.inputs")
    for threads in 128 256; do
      sed "s/(long long)blockDim.x/${threads}LL/g" "$cu" |
        perl -pe 's/for \(long long lm_q = lm_lane, lm_qi = 0; lm_q \* (\d+) < lm_e; lm_q \+= (\d+)LL, \+\+lm_qi\) \{/#pragma unroll\n    for (long long lm_qi = 0; lm_qi < (lm_e + $1 * $2 - 1) \/ ($1 * $2); ++lm_qi) { const long long lm_q = lm_lane + lm_qi * $2; if (lm_q * $1 >= lm_e) break;/' \
          >"${k}_unrolled${threads}.cu"
      sed -e 's/double a\([0-9]*\) = 0;/float a\1 = 0;/g' -e 's/+ (double)/+ (float)/g' "${k}_unrolled${threads}.cu" >"${k}_float${threads}.cu"
    done
    for v in "$cu" "${k}"_unrolled*.cu "${k}"_float*.cu; do
      "$NVCC" -O3 -arch=sm_90 -std=c++17 -I "$HERE" -DROW_INPUTS="$inputs" -include "$v" -o "${v%.cu}" \
        "$HERE/emitted_rows_harness.cu" >"${v%.cu}.log" 2>&1 &
    done
    wait
    base=$(basename "$k")
    [[ -x $k ]] || { echo "emitted_rows.sh: $base did not compile" >&2; tail -5 "$k.log" >&2; continue; }
    for threads in 128 256 512; do "$k" "${op}_${base}_as_emitted" $threads; done
    for threads in 128 256; do
      [[ -x ${k}_unrolled$threads ]] && "${k}_unrolled$threads" "${op}_${base}_unrolled" $threads
      [[ -x ${k}_float$threads ]] && "${k}_float$threads" "${op}_${base}_unrolled_float_sums" $threads
    done
  done
done
exit 0
