#!/usr/bin/env python3
"""scripts/bench cuda (or scripts/gpu): issue 10's benchmark case 1, BF16 linear layers
(and case 2: the RMSNorm and softmax rows, hand-written and compiled by the search, and an
elementwise chain compiled by the search,
backends/cuda/bench/elementwise_cuda),
luminal's CUDA kernels and cuBLASLt (backends/cuda/bench/suite_cuda_linear) against PyTorch
in the same run: eager, eager replayed from a CUDA graph, and torch.compile. Every peer
reads as many distinct weight copies per pass as our program does, so no one is flattered
by the L2. One JSON object per line; ratio_vs_best_peer = best peer time / our time (above
1 means we are faster).

    python3 bench/suite_cuda.py [--bin PATH] [--quick] [--budget-s SECONDS] [--elementwise-only]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BIN = Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release")) / "backends" / "cuda" / "suite_cuda_linear"


def emit(line):
    print(json.dumps(line), flush=True)


def time_us(run_pass, launches_per_pass, samples=5):
    """Median microseconds per launch of `run_pass` (which launches `launches_per_pass`)."""
    import torch
    run_pass()
    torch.cuda.synchronize()
    rounds = 1
    # Grow the rounds until one sample lasts at least 2 ms.
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(rounds):
            run_pass()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= 2.0 or rounds >= 64:
            break
        rounds *= 2
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(rounds):
            run_pass()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (rounds * launches_per_pass))
    return statistics.median(times)


def time_compiled(peers, notes, deadline, make_pass, launches):
    """peers["torch_compile"]: the pass `make_pass()` returns (it compiles with torch.compile),
    timed like the others, unless the budget is spent; a failure is a note, not fatal."""
    import torch
    if time.monotonic() >= deadline:
        notes.append("torch.compile skipped: time budget spent")
        return
    try:
        torch._dynamo.reset()
        peers["torch_compile"] = time_us(make_pass(), launches)
    except Exception as err:
        notes.append(f"torch.compile failed: {str(err).splitlines()[0][:200]}")


def torch_peers(K, N, M, copies, deadline):
    import torch
    import torch.nn.functional as F
    peers, notes = {}, []
    dev = "cuda"
    weights = [torch.empty(N, K, device=dev, dtype=torch.bfloat16).uniform_(-0.05, 0.05) for _ in range(copies)]
    x = torch.empty(M, K, device=dev, dtype=torch.bfloat16).uniform_(-1, 1)
    outs = [torch.empty(M, N, device=dev, dtype=torch.bfloat16) for _ in range(copies)]

    def eager_pass():
        for w in weights:
            F.linear(x, w)

    peers["torch_eager"] = time_us(eager_pass, copies)

    # Eager kernels replayed from one CUDA graph: the kernel time without launch overhead.
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for w, o in zip(weights, outs):
                torch.matmul(x, w.t(), out=o)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for w, o in zip(weights, outs):
                torch.matmul(x, w.t(), out=o)
        peers["torch_cuda_graph"] = time_us(graph.replay, copies)
        del graph
    except Exception as err:  # a peer that cannot run is reported, not fatal
        notes.append(f"torch_cuda_graph failed: {err}")

    def linear_pass():
        compiled = torch.compile(lambda a, b: F.linear(a, b), dynamic=False)
        return lambda: [compiled(x, w) for w in weights]

    time_compiled(peers, notes, deadline, linear_pass, copies)
    del weights, outs, x
    torch.cuda.empty_cache()
    return peers, notes


def torch_row_peers(op, rows, cols, copies, deadline):
    """RMSNorm or softmax over (rows, cols) BF16, distinct input per launch."""
    import torch
    import torch.nn.functional as F
    peers, notes = {}, []
    xs = [torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16).uniform_(-4, 4) for _ in range(copies)]
    weight = torch.empty(cols, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    if op == "rmsnorm":
        fn = lambda x: F.rms_norm(x, (cols,), weight, 1e-5)
    else:
        fn = lambda x: torch.softmax(x, dim=-1)

    def eager_pass():
        for x in xs:
            fn(x)

    peers["torch_eager"] = time_us(eager_pass, copies)
    try:
        eager_pass()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [fn(x) for x in xs]
        peers["torch_cuda_graph"] = time_us(graph.replay, copies)
        del graph, outs
    except Exception as err:
        notes.append(f"torch_cuda_graph failed: {err}")
    def rows_pass():
        compiled = torch.compile(fn, dynamic=False)
        return lambda: [compiled(x) for x in xs]

    time_compiled(peers, notes, deadline, rows_pass, copies)
    del xs
    torch.cuda.empty_cache()
    return peers, notes


def torch_elementwise_peers(rows, cols, deadline):
    """silu(a) * b + c over (rows, cols) BF16: eager (three kernels), from a CUDA graph, and
    torch.compile (one fused kernel). 128 MiB per pass at 4096 x 4096: past the L2."""
    import torch
    import torch.nn.functional as F
    peers, notes = {}, []
    a, b, c = (torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16).uniform_(-4, 4) for _ in range(3))
    fn = lambda: F.silu(a) * b + c
    peers["torch_eager"] = time_us(fn, 1)
    try:
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        peers["torch_cuda_graph"] = time_us(graph.replay, 1)
        del graph, out
    except Exception as err:
        notes.append(f"torch_cuda_graph failed: {err}")
    def chain_pass():
        compiled = torch.compile(lambda x, y, z: F.silu(x) * y + z, dynamic=False)
        return lambda: compiled(a, b, c)

    time_compiled(peers, notes, deadline, chain_pass, 1)
    del a, b, c
    torch.cuda.empty_cache()
    return peers, notes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(DEFAULT_BIN))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--elementwise-only", action="store_true",
                        help="only the compiled cases: decode and prefill attention, the chain, softmax, RMSNorm (elementwise_cuda beside --bin)")
    args = parser.parse_args()
    started = time.monotonic()
    chain = elementwise_case(Path(args.bin).parent / "elementwise_cuda", args.quick, started + args.budget_s)
    if args.elementwise_only:
        return chain

    command = [args.bin, "--budget-s", str(args.budget_s * 0.4)] + (["--quick"] if args.quick else [])
    if not Path(args.bin).exists():
        emit({"suite": "cuda", "case": "linear", "status": "failed", "error": f"{args.bin} not built"})
        return 1
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = []
    for raw in proc.stdout.splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            print(raw, file=sys.stderr)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)

    try:
        import torch
        torch_ok = torch.cuda.is_available()
        torch_why = "" if torch_ok else "torch sees no GPU"
    except ImportError as err:
        torch_ok, torch_why = False, f"torch unavailable: {err}"

    deadline = started + args.budget_s
    for line in lines:
        case = line.get("case", "")
        linear = re.fullmatch(r"linear_bf16_(\d+)x(\d+)_rows(\d+)", case)
        row_op = re.fullmatch(r"rows_(rmsnorm|softmax)_bf16_(\d+)x(\d+)", case)
        if not (linear or row_op) or "value" not in line:
            emit(line)
            continue
        if not torch_ok:
            line["peer_status"] = torch_why
        elif time.monotonic() > deadline:
            line["peer_status"] = "skipped: time budget spent"
        else:
            try:
                copies = int(line.get("weight_copies", 2))
                if linear:
                    K, N, M = (int(g) for g in linear.groups())
                    peers, notes = torch_peers(K, N, M, copies, deadline)
                else:
                    peers, notes = torch_row_peers(row_op.group(1), int(row_op.group(2)), int(row_op.group(3)),
                                                   copies, deadline)
                line["peers"] = {k: round(v, 3) for k, v in peers.items()}
                best = min(peers.values())
                line["ratio_vs_best_peer"] = round(best / line["value"], 4) if line["value"] else None
                if notes:
                    line["peer_notes"] = notes
            except Exception as err:
                line["peer_status"] = f"failed: {err}"
        emit(line)
    return proc.returncode or chain


def elementwise_case(binary, quick, deadline):
    """Case 2 through the compiler: the elementwise chain, then softmax and RMSNorm (the rows
    the hand-written kernels also run), each luminal's compiled program (elementwise_cuda)
    against its peers."""
    status = 0
    for op in ("attention", "prefill_attention", "chain", "softmax", "rmsnorm"):
        status = compiled_case(binary, quick, deadline, op) or status
    return status


def compiled_case(binary, quick, deadline, op):
    if not binary.exists():
        emit({"suite": "cuda", "case": f"compiled_{op}", "status": "failed", "error": f"{binary} not built"})
        return 1
    rows = cols = 1024 if quick else 4096
    copies = 3
    # attention: the attention op against the unfused program, both ours (no peers), over a
    # decode step (one query over 512 cached keys) and a 512-token prompt's prefill.
    attention = op in ("attention", "prefill_attention")
    extra = ["--layers", "4" if quick else "32"] if attention else ["--copies", str(copies)]
    if op == "prefill_attention":
        extra += ["--queries", "512", "--context", "0"]
    proc = subprocess.run([str(binary), "--op", "attention" if attention else op, "--rows", str(rows),
                           "--cols", str(cols)] + extra,
                          capture_output=True, text=True)
    line = None
    for raw in proc.stdout.splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            print(raw, file=sys.stderr)
    if line is None:
        print(proc.stderr, file=sys.stderr)
        emit({"suite": "cuda", "case": f"compiled_{op}", "status": "failed", "error": f"exit {proc.returncode}"})
        return 1
    if "value" in line and not attention:
        try:
            if op == "chain":
                peers, notes = torch_elementwise_peers(rows, cols, deadline)
            else:
                peers, notes = torch_row_peers(op, rows, cols, copies, deadline)
            line["peers"] = {k: round(v, 3) for k, v in peers.items()}
            line["ratio_vs_best_peer"] = round(min(peers.values()) / line["value"], 4) if line["value"] else None
            if notes:
                line["peer_notes"] = notes
        except Exception as err:
            line["peer_status"] = f"failed: {err}"
    emit(line)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
