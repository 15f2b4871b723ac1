#!/usr/bin/env python3
"""scripts/bench torch: the PyTorch corpus (tests/python/test_torch_corpus.py) through
luminal.torch.compile, timed against eager PyTorch and torch.compile (inductor) on the
same device in the same run. One JSON object per line; value is milliseconds per forward.

  suite_torch.py [--device cpu|cuda] [CASE ...]

--device cpu (default): luminal on the CPU backend (LUMINAL_BENCH_RUNTIME picks another
runtime registered in this build, e.g. "reference", the double-precision interpreter); every
contender gets the same threads (LUMINAL_BENCH_THREADS, default all cores: torch's
intra-op threads and luminal's pool, LUMINAL_NUM_THREADS). LUMINAL_BENCH_CPU_TIME=1 times
by process CPU time instead of wall time (on a shared machine wall time measures the
neighbours; with one thread, CPU time is the work), for every contender alike.
--device cuda: the model and inputs on the GPU, luminal on the "cuda" runtime, eager and
inductor on the same GPU; each timed call ends with torch.cuda.synchronize(). Without a
usable GPU (or a build without the CUDA runtime) it exits with status 2 and says why.
CASE names run a subset (default: the whole corpus)."""
import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[1]
THREADS = os.environ.get("LUMINAL_BENCH_THREADS")
if THREADS:  # luminal's CPU pool reads it when it starts (the first compile)
    os.environ.setdefault("LUMINAL_NUM_THREADS", THREADS)
CPU_TIME = os.environ.get("LUMINAL_BENCH_CPU_TIME") == "1"
clock = time.process_time if CPU_TIME else time.perf_counter
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch  # noqa: E402

import luminal  # noqa: E402
import luminal.torch as lt  # noqa: E402
from test_torch_corpus import CORPUS, mini_dlrm  # noqa: E402

# The reference's DLRM benchmark runs batch 2048 (tests use a small batch).
CASES = dict(CORPUS, mini_dlrm_b2048=lambda: mini_dlrm(batch=2048))
DEFAULT_RUNTIME = {"cpu": "cpu", "cuda": "cuda"}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="scripts/bench torch", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=sorted(DEFAULT_RUNTIME), default="cpu",
                   help="where every contender runs (default cpu)")
    p.add_argument("cases", nargs="*", metavar="CASE", help=f"corpus cases (default all: {', '.join(CASES)})")
    args = p.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    args.cases = args.cases or list(CASES)
    args.runtime = os.environ.get("LUMINAL_BENCH_RUNTIME", DEFAULT_RUNTIME[args.device])
    return args


def check_device(device: str, runtime: str) -> str | None:
    """Why the benchmark cannot run on `device` with luminal runtime `runtime`, or None."""
    runtimes = {r["name"]: r["device"] for r in luminal.runtimes()}
    if runtime not in runtimes:
        return f"luminal runtime '{runtime}' is not in this build (available: {', '.join(runtimes)})"
    if runtimes[runtime] != device:
        return f"luminal runtime '{runtime}' runs on '{runtimes[runtime]}', not on '{device}'"
    if device == "cuda" and not torch.cuda.is_available():
        return ("--device cuda needs a usable CUDA GPU, and torch.cuda.is_available() is False here "
                f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); run it on the GPU machine")
    return None


def time_ms(fn, args, sync, min_runs=3, budget_s=2.0):
    fn(*args)  # warm-up
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s and len(times) < 50):
        t0 = clock()
        fn(*args)
        sync()
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def emit(case, value, peers, runtime, device, **extra):
    line = {"suite": "torch", "case": case, "value": round(value, 4), "unit": "ms", "better": "lower",
            "runtime": runtime, "device": device, "threads": int(THREADS or os.cpu_count() or 1),
            "clock": "process_cpu" if CPU_TIME else "wall"}
    if peers:
        line["peers"] = {k: round(v, 4) for k, v in peers.items()}
        line["ratio_vs_best_peer"] = round(min(peers.values()) / value, 6) if value else None
    line.update(extra)
    print(json.dumps(line), flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    problem = check_device(args.device, args.runtime)
    if problem:
        print(f"suite_torch: {problem}", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    # The same threads for every contender (the CPU backend's pool uses every core).
    torch.set_num_threads(int(THREADS or os.cpu_count() or 1))
    for name in args.cases:
        model, inputs = CASES[name]()
        model = model.to(args.device)
        inputs = tuple(x.to(args.device) if isinstance(x, torch.Tensor) else x for x in inputs)
        try:
            t0 = time.perf_counter()
            compiled = lt.compile(model, inputs, runtime=args.runtime)
            compile_s = time.perf_counter() - t0
        except Exception as e:  # report, keep going: one model must not hide the others
            print(json.dumps({"suite": "torch", "case": name, "device": args.device,
                              "error": f"{type(e).__name__}: {e}"[:500]}), flush=True)
            continue
        with torch.no_grad():
            ref = model(*inputs)
            out = compiled(*inputs)
            err = (out.double() - ref.double()).abs().max().item()
            rel = err / max(ref.double().abs().max().item(), 1e-30)
            ours = time_ms(compiled, inputs, sync)
            peers = {"eager": time_ms(model, inputs, sync)}
            try:
                torch._dynamo.reset()
                inductor = torch.compile(model)
                peers["inductor"] = time_ms(inductor, inputs, sync)
            except Exception as e:  # inductor needs a working C++ toolchain (CPU) or Triton (GPU)
                print(f"suite_torch: inductor failed on {name}: {type(e).__name__}", file=sys.stderr)
        emit(name, ours, peers, args.runtime, args.device, max_abs_error=err, max_rel_error=rel,
             compile_s=round(compile_s, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
