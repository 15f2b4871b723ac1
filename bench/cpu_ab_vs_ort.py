#!/usr/bin/env python3
"""A/B of two luminal builds against ONNX Runtime on a shared machine (docs/CPU_BACKEND.md,
session 22). Wall time on a shared 2-core host moves 2x between minutes, so a single
suite run cannot tell a few percent apart. This interleaves, per round, an ONNX Runtime
sample (in this process) with one luminal process of each build, alternating which build
goes first, and reports medians, ranges and per-round ratios (the ORT sample taken just
before a luminal process, divided by that process's median).

  .venv/bin/python bench/cpu_ab_vs_ort.py --base DIR --new DIR [--rounds N] CASE...

DIR is a build directory holding bench/suite_cpu (build/release, or a copy of it). CASE is
mlp or llama_block: the models, inputs and ORT session options of bench/suite_cpu.py. Both
builds read the same kernel cache, so they run the same searched program."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite_cpu as S  # noqa: E402  (sets the thread counts of every system)

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def case_tensors(case):
    """The module and named tensors of bench/suite_cpu.py's case (same seeds, same values)."""
    captured = {}

    def grab(name, module, inputs, tensors, **extra):
        captured.update(module=module, tensors=tensors)

    real = S.graph_case
    S.graph_case = grab
    try:
        {"mlp": S.case_mlp, "llama_block": S.case_llama_block}[case]()
    finally:
        S.graph_case = real
    return captured["module"], captured["tensors"]


def ort_session(case, module, x, work):
    path = work / f"{case}.onnx"
    torch.onnx.export(module.eval(), (x,), str(path), input_names=["in0"], opset_version=17, dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = S.THREADS
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def luminal_ms(build, case, weights, cache):
    env = dict(os.environ, LUMINAL_CACHE_DIR=cache)
    cmd = [str(Path(build) / "bench" / "suite_cpu"), "--case", case, "--reps", "15", "--search", str(S.SEARCH),
           "--search-time", str(S.SEARCH_TIME), "--verify", "never", "--inputs", str(weights)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=S.CASE_TIMEOUT_S, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])["luminal_ms"]


def summary(values):
    return f"{statistics.median(values):.4f} [{min(values):.4f}, {max(values):.4f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("cases", nargs="+", choices=["mlp", "llama_block"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="luminal_ab_"))
    builds = {"base": args.base, "new": args.new}
    for case in args.cases:
        module, tensors = case_tensors(case)
        weights = work / f"{case}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(weights))
        sess = ort_session(case, module, tensors["x"], work)
        feed = {"in0": tensors["x"].numpy()}
        cache = str(work / f"cache_{case}")
        luminal_ms(args.new, case, weights, cache)  # the search, once: both builds then load its program
        times = {"onnxruntime": [], "base": [], "new": []}
        ratios = {"base": [], "new": []}
        loads = []
        for r in range(args.rounds):
            for which in (["base", "new"] if r % 2 == 0 else ["new", "base"]):
                peer = S.median_ms(lambda: sess.run(None, feed))
                ours = luminal_ms(builds[which], case, weights, cache)
                times["onnxruntime"].append(peer)
                times[which].append(ours)
                ratios[which].append(peer / ours)
                loads.append(os.getloadavg()[0])
        line = {"case": case, "rounds": args.rounds, "threads": S.THREADS,
                "ms": {k: summary(v) for k, v in times.items()},
                "ratio_vs_onnxruntime": {k: summary(v) for k, v in ratios.items()},
                "load_avg_1m": f"{min(loads):.2f}-{max(loads):.2f}"}
        print(json.dumps(line), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(S.WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
