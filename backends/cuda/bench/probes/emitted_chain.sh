#!/usr/bin/env bash
# Probe (scripts/gpu, GPU_PROBE=1): case 2's chain as luminal emits it, each candidate kernel
# the search compiled timed alone by emitted_chain_harness.cu (plain launches and a captured
# graph as the runtime's), an edit of the first (approximate reciprocal), and the runtime's
# own op table for the program it chose (LUMINAL_CUDA_PROFILE). Arguments: the build folder
# (elementwise_cuda built there) and nvcc. Prints JSON lines, the op table on stderr.
set -uo pipefail
BUILD=$1 NVCC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$BUILD/probes/emitted
rm -rf "$WORK" && mkdir -p "$WORK/dump"
LUMINAL_KERNEL_DUMP=$WORK/dump LUMINAL_CACHE_DIR=$WORK/cache LUMINAL_PROGRAM_CACHE=0 \
  "$BUILD/backends/cuda/elementwise_cuda" --search-s 2 --runs 3 >"$WORK/bench.json" || { cat "$WORK/bench.json"; exit 1; }
python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); print(json.dumps({"probe": "emitted_chain", "variant": "elementwise_cuda", "us": l.get("value"), "single_run_us": l.get("single_run_us")}))' "$WORK/bench.json"
LUMINAL_CUDA_PROFILE=1 LUMINAL_CACHE_DIR=$WORK/cache LUMINAL_PROGRAM_CACHE=0 \
  "$BUILD/backends/cuda/elementwise_cuda" --search-s 2 --runs 3 2>&1 >/dev/null | grep -A4 "cuda profile" | tail -5 >&2
# Every dumped kernel with three BF16 inputs (a unit holds several kernels): renamed
# `emitted_chain`, one program each.
# Every dumped kernel with three BF16 inputs (a unit holds several kernels): renamed
# `emitted_chain`, one program each.
python3 - "$WORK" <<'PYEOF'
import re, sys, pathlib
work = pathlib.Path(sys.argv[1])
three = re.compile(r"void lm_[0-9a-f]+\((const unsigned short\* __restrict__ in0, const unsigned short\* __restrict__ in1, "
                   r"const unsigned short\* __restrict__ in2, unsigned short\*)")
i = 0
for src in sorted((work / "dump").glob("lm_*.cu")):
    text = src.read_text()
    for m in three.finditer(text):
        i += 1
        out = text[:m.start()] + "void emitted_chain(" + m.group(1) + text[m.end():]
        body = out[out.index("void emitted_chain("):]
        body = body[:body.index("\n}\n")]
        (work / f"candidate{i}.cu").write_text(out)
        (work / f"candidate{i}.vec").write_text(str(body.count("LM_COPY16")))
PYEOF
for cu in "$WORK"/candidate*.cu; do  # compiled in parallel
  "$NVCC" -O3 -arch=sm_90 -std=c++17 -include "$cu" -o "${cu%.cu}" "$HERE/emitted_chain_harness.cu" >"${cu%.cu}.log" 2>&1 &
done
wait
for cu in "$WORK"/candidate*.cu; do
  c=$(basename "$cu" .cu)
  [[ -x $WORK/$c ]] || { echo "emitted_chain.sh: $c did not compile" >&2; tail -5 "$WORK/$c.log" >&2; continue; }
  "$WORK/$c" "${c}_vector_copies_$(cat "$WORK/$c.vec")" --random
  "$WORK/$c" "${c}_vector_copies_$(cat "$WORK/$c.vec")" --random --graph
done
[[ -f $WORK/candidate1.cu ]] || { echo "emitted_chain.sh: no three-input kernel among the dumped sources" >&2; exit 1; }
sed 's|LM_FN float lm_recip(float a) { return 1.0f / a; }|LM_FN float lm_recip(float a) { return __fdividef(1.0f, a); }|' "$WORK/candidate1.cu" >"$WORK/approx_recip.cu"
"$NVCC" -O3 -arch=sm_90 -std=c++17 -include "$WORK/approx_recip.cu" -o "$WORK/approx_recip" "$HERE/emitted_chain_harness.cu" >>"$WORK/nvcc.log" 2>&1 &&
  "$WORK/approx_recip" candidate1_approx_recip --random
exit 0
