#!/usr/bin/env python3
"""scripts/bench torch: the PyTorch corpus (tests/python/test_torch_corpus.py) through
luminal.torch.compile, timed against eager PyTorch and torch.compile (inductor) on the
same CPU in the same run. One JSON object per line; value is milliseconds per forward.

luminal runs on the CPU backend by default (LUMINAL_BENCH_RUNTIME picks another runtime
registered in this build, e.g. "reference", the double-precision interpreter). Every
contender gets the same threads (LUMINAL_BENCH_THREADS, default all cores). Arguments: case
names to run a subset (default: the whole corpus)."""
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

import luminal.torch as lt  # noqa: E402
from test_torch_corpus import CORPUS, mini_dlrm  # noqa: E402

# The reference's DLRM benchmark runs batch 2048 (tests use a small batch).
CASES = dict(CORPUS, mini_dlrm_b2048=lambda: mini_dlrm(batch=2048))

RUNTIME = os.environ.get("LUMINAL_BENCH_RUNTIME", "cpu")


def time_ms(fn, args, min_runs=3, budget_s=2.0):
    fn(*args)  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s and len(times) < 50):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def emit(case, value, peers, **extra):
    line = {"suite": "torch", "case": case, "value": round(value, 4), "unit": "ms", "better": "lower",
            "runtime": RUNTIME}
    if peers:
        line["peers"] = {k: round(v, 4) for k, v in peers.items()}
        line["ratio_vs_best_peer"] = round(min(peers.values()) / value, 6) if value else None
    line.update(extra)
    print(json.dumps(line), flush=True)


def main():
    cases = sys.argv[1:] or list(CASES)
    # The same threads for every contender (the CPU backend's pool uses every core).
    torch.set_num_threads(int(os.environ.get("LUMINAL_BENCH_THREADS", str(os.cpu_count() or 1))))
    for name in cases:
        model, inputs = CASES[name]()
        try:
            t0 = time.perf_counter()
            compiled = lt.compile(model, inputs, runtime=RUNTIME)
            compile_s = time.perf_counter() - t0
        except Exception as e:  # report, keep going: one model must not hide the others
            print(json.dumps({"suite": "torch", "case": name, "error": f"{type(e).__name__}: {e}"[:500]}),
                  flush=True)
            continue
        with torch.no_grad():
            ref = model(*inputs)
            out = compiled(*inputs)
            err = (out.double() - ref.double()).abs().max().item()
            rel = err / max(ref.double().abs().max().item(), 1e-30)
            ours = time_ms(compiled, inputs)
            peers = {"eager": time_ms(model, inputs)}
            try:
                torch._dynamo.reset()
                inductor = torch.compile(model)
                peers["inductor"] = time_ms(inductor, inputs)
            except Exception as e:  # inductor needs a working C++ toolchain
                print(f"suite_torch: inductor failed on {name}: {type(e).__name__}", file=sys.stderr)
        emit(name, ours, peers, max_abs_error=err, max_rel_error=rel, compile_s=round(compile_s, 3))


if __name__ == "__main__":
    main()
