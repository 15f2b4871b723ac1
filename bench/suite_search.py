#!/usr/bin/env python3
"""scripts/bench search (same-run peer): luminal's e-graph engine against egglog, the Rust
equality-saturation engine (through its PyPI package), on one workload: the rules and
expressions of bench/suite_search_engine.cpp, each run for the same number of iterations
with no node limit. Both engines apply every match of an iteration before rebuilding,
so they grow the same e-graph; the e-node counts are compared per expression."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release")) / "bench" / "suite_search_engine"
ITERATIONS = 13  # the largest expression reaches ~23k e-nodes


def to_egglog(rules: str) -> str:
    """Our rule language is egglog's plus `?` on variables and rule names."""
    rules = re.sub(r':name "[^"]*"', "", rules)
    return re.sub(r"\?([A-Za-z_][A-Za-z0-9_]*)", r"\1", rules)


def egglog_run(program: str, term: str, iterations: int):
    import egglog.bindings as eb

    best, nodes = float("inf"), 0
    for _ in range(3):
        g = eb.EGraph()
        g.run_program(*g.parse_program(program))
        t0 = time.process_time()
        g.run_program(*g.parse_program(f"(let $root {term})\n(run math {iterations})"))
        best = min(best, time.process_time() - t0)
        sizes = g.run_program(*g.parse_program("(print-size)"))[0].sizes
        nodes = sum(n for _, n in sizes)
    return nodes, best


def main():
    ours = json.loads(subprocess.run([str(BIN), "--iterations", str(ITERATIONS)], check=True,
                                     capture_output=True, text=True).stdout)
    line = {"suite": "search", "case": "engine_throughput_vs_egglog", "unit": "enodes/s", "better": "higher"}
    our_nodes = sum(e["nodes"] for e in ours["expressions"])
    our_cpu = sum(e["cpu_s"] for e in ours["expressions"])
    line["value"] = round(our_nodes / our_cpu)
    try:
        import egglog  # noqa: F401
    except ImportError as err:
        line["status"] = f"peer unavailable: {err}"
        print(json.dumps(line), flush=True)
        return
    program = to_egglog(ours["rules"])
    peer_nodes, peer_cpu, mismatches = 0, 0.0, []
    for e in ours["expressions"]:
        n, cpu = egglog_run(program, e["term"], ITERATIONS)
        peer_nodes += n
        peer_cpu += cpu
        if n != e["nodes"]:
            mismatches.append(f'{e["term"]}: luminal {e["nodes"]}, egglog {n}')
    peer = round(peer_nodes / peer_cpu)
    line["peers"] = {"egglog": peer}
    line["ratio_vs_best_peer"] = round(line["value"] / peer, 3)
    line["note"] = (
        f"{len(ours['expressions'])} expressions x {ITERATIONS} iterations (or saturation), no node limit, "
        f"best of 3 CPU times each; luminal {our_nodes} e-nodes in {our_cpu:.3f}s, egglog "
        f"{peer_nodes} e-nodes in {peer_cpu:.3f}s; "
        + ("identical e-graph sizes on every expression" if not mismatches else
           "e-graph sizes differ: " + "; ".join(mismatches)))
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
