#!/usr/bin/env python3
"""scripts/gpu (or scripts/bench cuda): issue 10's benchmark case 5, the reference's
MiniDLRM at batch 2048 (embedding tables [10, 20, 30] of width 4, bottom MLP [13, 8, 4],
top MLP [10, 8, 1]), luminal against PyTorch in the same run.

luminal: backends/cuda/bench/dlrm_cuda (the model built with the tensor API, compiled by the
search for the CUDA runtime, replayed as one CUDA graph; it checks its output against a host
reference in double). Peers, on the same GPU, the same architecture
(tests/python/test_torch_corpus.py's MiniDLRM): eager, eager replayed from a CUDA graph,
torch.compile (default mode) and torch.compile(mode="reduce-overhead").

Every time is the median of one call between CUDA events (the stream idle before it, so a
launch's host cost counts, as it does for ours); the host-clock medians (call plus
synchronize) come along. Target: at most half the time of eager with a CUDA graph.
One JSON object per line.

    python3 bench/suite_cuda_dlrm.py --bin build/gpu/backends/cuda/dlrm_cuda [--budget-s S]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 2048


def log(msg):
    print(f"suite_cuda_dlrm: {msg}", file=sys.stderr, flush=True)


def ours(binary: str, runs: int, search_s: float, timeout_s: float):
    cmd = [binary, "--batch", str(BATCH), "--runs", str(runs), "--search-s", str(search_s)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"dlrm_cuda timed out after {timeout_s:.0f} s"}
    lines = [l for l in res.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"error": f"dlrm_cuda exit {res.returncode}: {(res.stderr or res.stdout)[-1500:]}"}
    out = json.loads(lines[-1])
    if res.returncode != 0 and "error" not in out:
        out["error"] = f"exit {res.returncode}: {res.stderr[-500:]}"
    return out


def time_call(fn, runs):
    """Median microseconds of one call between CUDA events, and of call + synchronize on
    the host clock."""
    import torch
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    events, host = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(runs):
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        end.synchronize()
        host.append((time.perf_counter() - t0) * 1e6)
        events.append(start.elapsed_time(end) * 1e3)
    return statistics.median(events), statistics.median(host)


def peers(runs: int, deadline: float):
    import torch
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from test_torch_corpus import MiniDLRM  # noqa: E402 - the corpus's model, one definition

    torch.manual_seed(0)
    model = MiniDLRM().cuda().eval()
    dense = torch.randn(BATCH, 13, device="cuda")
    sparse = torch.stack([torch.randint(0, n, (BATCH,), device="cuda") for n in (10, 20, 30)], dim=1)
    res, notes = {}, []
    with torch.inference_mode():
        res["torch_eager"] = time_call(lambda: model(dense, sparse), runs)

        # Eager kernels captured once into a CUDA graph and replayed (static inputs).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(dense, sparse)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = model(dense, sparse)
        res["torch_cuda_graph"] = time_call(graph.replay, runs)
        del static_out

        for mode, name in ((None, "torch_compile"), ("reduce-overhead", "torch_compile_reduce_overhead")):
            if time.time() > deadline:
                notes.append(f"{name}: no time left")
                continue
            try:
                torch._dynamo.reset()
                compiled = torch.compile(model, mode=mode) if mode else torch.compile(model)
                t0 = time.perf_counter()
                compiled(dense, sparse)
                torch.cuda.synchronize()
                res[name + "_compile_s"] = time.perf_counter() - t0
                res[name] = time_call(lambda: compiled(dense, sparse), runs)
            except Exception as e:  # noqa: BLE001 - report, keep going
                notes.append(f"{name} failed: {type(e).__name__}: {str(e)[:300]}")
    return res, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release"))
                                         / "backends" / "cuda" / "dlrm_cuda"))
    ap.add_argument("--budget-s", type=float, default=150)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--search-s", type=float, default=20)
    args = ap.parse_args()
    deadline = time.time() + args.budget_s
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"suite": "cuda", "case": "mini_dlrm_b2048", "status": "skipped",
                          "reason": "no GPU visible to PyTorch"}), flush=True)
        return 0

    o = ours(args.bin, args.runs, args.search_s, timeout_s=max(30.0, 0.5 * args.budget_s))
    log(f"luminal: {o}")
    p, notes = peers(args.runs, deadline)
    log(f"peers: {p} {notes}")

    value = o.get("event_us")
    line = {"suite": "cuda", "case": "mini_dlrm_b2048", "value": value, "unit": "us", "better": "lower",
            "target": "<= 0.5x eager with a CUDA graph (torch_cuda_graph)"}
    timed = {k: v for k, v in p.items() if isinstance(v, tuple)}
    if timed:
        line["peers"] = {k: round(v[0], 3) for k, v in timed.items()}
        line["peers_host_us"] = {k: round(v[1], 3) for k, v in timed.items()}
        if value:
            line["ratio_vs_best_peer"] = round(min(v[0] for v in timed.values()) / value, 4)
            if "torch_cuda_graph" in timed:
                graph_us = timed["torch_cuda_graph"][0]
                line["fraction_of_cuda_graph"] = round(value / graph_us, 4)
                line["meets_target"] = value <= 0.5 * graph_us
    line["host_us"] = o.get("host_us")
    for k in ("compile_s", "max_abs_diff", "graphs_captured", "kernels_compiled"):
        if k in o:
            line[k] = o[k]
    compile_peers = {k[:-len("_compile_s")]: round(v, 2) for k, v in p.items() if k.endswith("_compile_s")}
    if compile_peers:
        line["peers_compile_s"] = compile_peers
    if "error" in o or "skipped" in o:
        line["status"] = "failed" if "error" in o else "skipped"
        line["error"] = o.get("error", o.get("skipped"))
    elif not o.get("ok", False):
        line["status"] = "failed"
        line["error"] = f"output differs from the host reference by {o.get('max_abs_diff')}"
    if notes:
        line["peer_notes"] = notes
    print(json.dumps(line), flush=True)
    return 1 if line.get("status") == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
