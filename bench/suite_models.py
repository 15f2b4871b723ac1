#!/usr/bin/env python3
"""scripts/bench models: TTFT and TPOT of luminal against Hugging Face transformers,
same model, same machine, same run. One JSON object per line."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release")) / "models" / "luminal"
PROMPT = "The secret of life is"
NEW_TOKENS = 32


def emit(case, value, unit, peers=None, **extra):
    line = {"suite": "models", "case": case, "value": value, "unit": unit, "better": "lower"}
    if peers:
        line["peers"] = peers
        best = min(peers.values())
        line["ratio_vs_best_peer"] = round(best / value, 4) if value else None
    line.update(extra)
    print(json.dumps(line), flush=True)


DEVICE = os.environ.get("LUMINAL_BENCH_DEVICE", "cpu")


def luminal_generate(model_dir, cache_dir):
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(cache_dir))
    out = subprocess.run([str(BIN), "generate", "--model", str(model_dir), "--prompt", PROMPT,
                          "--max-tokens", str(NEW_TOKENS), "--temperature", "0", "--device", DEVICE],
                         check=True, capture_output=True, text=True, env=env).stdout
    ttft = float(re.search(r"TTFT: ([\d.]+) ms", out).group(1))
    tpot = float(re.search(r"TPOT: ([\d.]+) ms", out).group(1))
    compile_ms = float(re.search(r"compile: ([\d.]+) ms", out).group(1))
    return ttft, tpot, compile_ms


def hf_generate(model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(os.cpu_count() or 1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = tok(PROMPT, return_tensors="pt").input_ids
    best_ttft, best_tpot = float("inf"), float("inf")
    with torch.inference_mode():
        for _ in range(3):  # best of 3, after the first warms up allocations
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            ttft = time.perf_counter() - t0
            past = out.past_key_values
            t1 = time.perf_counter()
            for _ in range(NEW_TOKENS - 1):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tpot = (time.perf_counter() - t1) / (NEW_TOKENS - 1)
            best_ttft, best_tpot = min(best_ttft, ttft), min(best_tpot, tpot)
    return best_ttft * 1e3, best_tpot * 1e3


def main():
    model_dir = ROOT / "models" / "default"
    # The first run starts from an empty cache (a cold compile: search and kernel builds);
    # the next ones find the programs and kernels it chose (a warm compile).
    with tempfile.TemporaryDirectory(prefix="luminal_bench_cache_") as cache_dir:
        runs = [luminal_generate(model_dir, cache_dir) for _ in range(3)]
    ttft, tpot = min(r[0] for r in runs), min(r[1] for r in runs)
    cold, warm = runs[0][2], min(r[2] for r in runs[1:])
    hf_ttft, hf_tpot = hf_generate(model_dir)
    note = (f"luminal --device {DEVICE} (best of 3 runs), HF transformers eager F32 on CPU (best of 3), "
            f"{os.cpu_count()} threads each")
    emit("default_model_ttft", ttft, "ms", {"hf_transformers_cpu": round(hf_ttft, 3)}, note=note)
    emit("default_model_tpot", tpot, "ms", {"hf_transformers_cpu": round(hf_tpot, 3)}, note=note)
    emit("default_model_compile_cold", cold, "ms", target=10000, note="empty kernel and program caches")
    emit("default_model_compile_warm", warm, "ms", target=1000, note="the caches the cold run filled")
    emit("llama3_8b_bf16_tpot", None, "ms", status="blocked",
         reason="runs on the GPU machine (scripts/gpu); this suite runs on the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
