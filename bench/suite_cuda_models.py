#!/usr/bin/env python3
"""scripts/bench cuda (or scripts/gpu): issue 10's model cases on the GPU, each against
PyTorch in the same run.

  3. Llama-3-8B decode TPOT at 512 tokens of context, batch 1 (floor: weights + KV cache
     read once per token, over the copy bandwidth measured in this run);
  4. Llama-3-8B TTFT for a 512-token prompt;
  6. compile time of the 8B model, cold (empty caches) and warm (the caches the cold run
     filled), against torch.compile's first call.

The model is the real Llama-3-8B architecture with random BF16 weights, written once by
this script (`--model-dir`, default build/gpu/llama3-8b-random; the tokenizer is the shipped
model's: token ids only index the embedding). luminal runs through `luminal generate
--device cuda`; the peers are Hugging Face transformers on the same weights: eager, and
torch.compile (decode: mode="reduce-overhead" over a static cache). One JSON object per
line; ratio_vs_best_peer = best peer time / ours (above 1: we are faster).

    python3 bench/suite_cuda_models.py [--bin PATH] [--model-dir DIR] [--quick] [--budget-s S]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BIN = Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release")) / "models" / "luminal"
PROMPT_TOKENS = 512
NEW_TOKENS = 33

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "use_cache": True,
}


def emit(line):
    print(json.dumps(line), flush=True)


def log(msg):
    print(f"suite_cuda_models: {msg}", file=sys.stderr, flush=True)


def write_tokenizer(model_dir: Path, vocab_size: int):
    """The shipped model's BPE tokenizer, its vocabulary padded to the model's with tokens no
    merge produces ("r<id>"), so that every id a random model generates decodes (the CLI
    prints the text as it goes) while prompts encode as before."""
    tok = json.loads((ROOT / "models" / "default" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    used = set(vocab) | {t["content"] for t in tok.get("added_tokens", [])}
    taken = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    for i in range(vocab_size):
        if i not in taken:
            name = f"r{i}"
            assert name not in used
            vocab[name] = i
    (model_dir / "tokenizer.json").write_text(json.dumps(tok))
    shutil.copy(ROOT / "models" / "default" / "tokenizer_config.json", model_dir / "tokenizer_config.json")


def write_model(model_dir: Path, config: dict):
    """Random BF16 weights in the real architecture, sharded like a Hugging Face checkpoint."""
    import torch
    from safetensors.torch import save_file
    if (model_dir / "done").exists():
        return
    shutil.rmtree(model_dir, ignore_errors=True)
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(model_dir, config["vocab_size"])
    h, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    hd, kvh, vocab = config["head_dim"], config["num_key_value_heads"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for l in range(layers):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (config["num_attention_heads"] * hd, h),
                       p + "self_attn.k_proj.weight": (kvh * hd, h), p + "self_attn.v_proj.weight": (kvh * hd, h),
                       p + "self_attn.o_proj.weight": (h, config["num_attention_heads"] * hd),
                       p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                       p + "mlp.down_proj.weight": (h, inter)})
    gen = torch.Generator(device="cuda").manual_seed(0)
    shard, shard_bytes, index, n = {}, 0, {}, 0

    def flush():
        nonlocal shard, shard_bytes, n
        if shard:
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(model_dir / name), metadata={"format": "pt"})
            for k in shard:
                index[k] = name
            shard, shard_bytes, n = {}, 0, n + 1

    for name, shape in shapes.items():
        if len(shape) == 1:
            t = 1.0 + 0.1 * torch.rand(shape, generator=gen, device="cuda")
        else:  # scaled like an initialised layer, so activations stay finite through 32 layers
            bound = (3.0 / shape[1]) ** 0.5
            t = (torch.rand(shape, generator=gen, device="cuda") * 2 - 1) * bound
        shard[name] = t.to(torch.bfloat16).cpu()
        shard_bytes += shard[name].numel() * 2
        if shard_bytes >= 4 << 30:
            flush()
    flush()
    del gen
    torch.cuda.empty_cache()
    (model_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    (model_dir / "done").write_text("ok")


def prompt_text(model_dir: Path, tokens: int) -> str:
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
             "under a pale moon and the river keeps running to the sea ").split()
    text, i = "", 0
    while len(tok(text).input_ids) < tokens:
        text += words[i % len(words)] + " "
        i += 1
    return text.strip()


def copy_bandwidth_tbs():
    import torch
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return 2 * n / statistics.median(times) / 1e12


def _without_progress(text):
    """stderr without the search's progress bar, which redraws itself with carriage returns."""
    lines = re.split(r"[\r\n]", text or "")
    return "\n".join(l for l in lines if l.strip() and not re.match(r"\s*search \[", l))


def luminal_run(binary: Path, model_dir: Path, prompt: str, cache_dir: Path, search_s: float, timeout_s: float,
                extra_env=None):
    """One `luminal generate --device cuda` process: the prompt three times on the compiled
    model. The first run of a prompt length resolves and allocates its plan and runs eagerly,
    the second captures and instantiates its CUDA graph (host work a server pays once per
    length), the third replays it: TTFT and TPOT are the third's, as the peers' are medians
    after warm-up runs; the first's and second's TTFT are reported beside it. Compile time is
    the process's."""
    env = dict(os.environ, LUMINAL_CACHE_DIR=str(cache_dir), **(extra_env or {}))
    cmd = [str(binary), "generate", "--device", "cuda", "--model", str(model_dir), "--prompt", prompt,
           "--prompt", prompt, "--prompt", prompt, "--max-tokens", str(NEW_TOKENS), "--temperature", "0",
           "--search-seconds", str(search_s), "--verbose"]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=max(timeout_s, 10))
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        log(f"luminal generate's stderr (progress bars left out; last 40000 characters):\n{_without_progress(err)[-40000:]}")
        raise RuntimeError(f"luminal generate timed out after {timeout_s:.0f} s: {err[-800:]!r}") from None
    wall = time.perf_counter() - t0
    log(f"luminal generate's stderr (progress bars left out; last 40000 characters):\n{_without_progress(res.stderr)[-40000:]}")
    if res.returncode != 0:
        raise RuntimeError(f"luminal generate failed ({res.returncode}): {(res.stderr or res.stdout)[-1500:]}")
    out = res.stdout + res.stderr

    def nums(pattern):
        return [float(v) for v in re.findall(pattern, out)]

    ttft, tpot = nums(r"TTFT: ([\d.]+) ms"), nums(r"TPOT: ([\d.]+) ms")
    compile_ms = nums(r"(?<!\+)compile: ([\d.]+) ms")
    generated = nums(r"generated: (\d+)")
    prompt_tokens = nums(r"prompt tokens: (\d+)")
    # --verbose: the compile report's breakdown (search, verify, kernels...) on stderr.
    report = [l.strip() for l in res.stderr.splitlines() if re.match(r"\s*compile: [\d.]+ s ", l)]
    split = re.findall(r"TPOT split: (.*)", out)
    # Verification falling back to an unrewritten program costs several times the time:
    # say so in the results, not only in the log (session 21: TTFT 88 ms against 15).
    rejected = len(re.findall(r"rejected the chosen program", res.stderr))
    if not ttft or not compile_ms:
        raise RuntimeError(f"luminal generate printed no TTFT/compile lines: {out[-1500:]}")
    return {"ttft_ms": ttft[-1], "ttft_first_ms": ttft[0], "ttft_second_ms": ttft[1] if len(ttft) > 2 else None, "tpot_ms": tpot[-1] if tpot else None,
            "compile_ms": compile_ms[0], "prompt_tokens": prompt_tokens[-1] if prompt_tokens else None,
            "generated": generated[-1] if generated else None, "wall_s": round(wall, 2),
            "compile_report": report[0][:600] if report else None, "tpot_split": split[-1] if split else None,
            "verification_rejections": rejected}


class _Saved(dict):
    """Results written to a file as each arrives, so a peer run killed at the budget still
    reports what it measured."""

    def __init__(self, path):
        super().__init__(notes=[])
        self.path = path

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.save()

    def note(self, text):
        self["notes"].append(text)
        self.save()

    def save(self):
        if self.path:
            Path(self.path).write_text(json.dumps(self))


def run_peers(model_dir: Path, prompt: str, deadline: float):
    """torch_peers in a child process, killed at the deadline; returns what it measured."""
    with tempfile.TemporaryDirectory(prefix="suite_cuda_models_") as tmp:
        out, prompt_file = Path(tmp) / "peers.json", Path(tmp) / "prompt.txt"
        prompt_file.write_text(prompt)
        cmd = [sys.executable, __file__, "--peers-only", str(out), "--model-dir", str(model_dir),
               "--prompt-file", str(prompt_file), "--budget-s", str(max(deadline - time.time() - 20, 10))]
        try:
            subprocess.run(cmd, timeout=max(deadline - time.time(), 15))
            killed = None
        except subprocess.TimeoutExpired:
            killed = "peers stopped at the time budget"
        res = json.loads(out.read_text()) if out.exists() else {"notes": []}
    notes = res.pop("notes", [])
    if killed:
        notes.append(killed)
    return res, notes


def torch_peers(model_dir: Path, prompt: str, deadline: float, out_path=None):
    """TTFT and TPOT of HF transformers on the same weights: eager and torch.compile."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    ids = torch.tensor([tok(prompt).input_ids], device="cuda")
    try:  # straight onto the GPU (accelerate), else through host memory
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, device_map="cuda").eval()
    except (ImportError, ValueError, TypeError):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    res = _Saved(out_path)

    def cuda_ms(fn, reps=5):
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    with torch.inference_mode():
        model(ids)  # warm-up
        res["ttft_eager"] = cuda_ms(lambda: model(ids))
        # Eager decode with the default dynamic cache at PROMPT_TOKENS of context.
        out = model(ids, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)

        def eager_steps(k=8):
            nonlocal past, nxt
            for _ in range(k):
                o = model(nxt, past_key_values=past, use_cache=True)
                past, nxt = o.past_key_values, o.logits[:, -1:].argmax(-1)

        res["tpot_eager"] = cuda_ms(eager_steps, reps=3) / 8
        del past, out
        torch.cuda.empty_cache()

        if time.time() < deadline:
            try:  # torch.compile of the prefill (default mode): its first call is the compile time
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled(ids)
                torch.cuda.synchronize()
                res["compile_s_torch"] = time.perf_counter() - t0
                res["ttft_compile"] = cuda_ms(lambda: compiled(ids))
            except Exception as e:  # noqa: BLE001 - report, keep going
                res.note(f"torch.compile prefill failed: {type(e).__name__}: {str(e)[:200]}")
            torch._dynamo.reset()
        else:
            res.note("torch.compile prefill skipped: time budget")

        if time.time() < deadline:
            try:  # decode: torch.compile(mode="reduce-overhead") over a static cache (CUDA graphs)
                from transformers import StaticCache
                try:  # transformers 5: allocated on first use, on the keys' device and dtype
                    cache = StaticCache(config=model.config, max_cache_len=PROMPT_TOKENS + 64)
                except TypeError:  # transformers 4
                    cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=PROMPT_TOKENS + 64,
                                        device="cuda", dtype=torch.bfloat16)
                pos = torch.arange(ids.shape[1], device="cuda")
                o = model(ids, past_key_values=cache, cache_position=pos, use_cache=True)
                nxt = o.logits[:, -1:].argmax(-1)
                step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                p = ids.shape[1]

                def one(k=8):
                    nonlocal nxt, p
                    for _ in range(k):
                        cp = torch.tensor([p], device="cuda")
                        o = step(nxt, past_key_values=cache, cache_position=cp, position_ids=cp[None], use_cache=True)
                        nxt = o.logits[:, -1:].argmax(-1).clone()
                        p += 1

                for _ in range(3):  # compile, record the graph, replay
                    one(1)
                res["tpot_compile"] = cuda_ms(lambda: one(8), reps=3) / 8
            except Exception as e:  # noqa: BLE001
                res.note(f"torch.compile decode failed: {type(e).__name__}: {str(e)[:200]}")
        else:
            res.note("torch.compile decode skipped: time budget")
    del model
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(DEFAULT_BIN))
    ap.add_argument("--model-dir", default=str(ROOT / "build" / "gpu" / "llama3-8b-random"))
    ap.add_argument("--quick", action="store_true", help="2 layers instead of 32 (a smoke run)")
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--search-seconds", type=float, default=10)
    ap.add_argument("--variant-env", action="append", default=[], metavar="K=V[,K=V]",
                    help="after the warm run, one more warm run per value with these variables set "
                         "(e.g. LUMINAL_GEMV_PREFETCH=0): an A/B of a runtime switch in the same call")
    ap.add_argument("--peers-only", help=argparse.SUPPRESS)  # internal: the peers' child process
    ap.add_argument("--prompt-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peers_only:
        torch_peers(Path(args.model_dir), Path(args.prompt_file).read_text(), time.time() + args.budget_s,
                    args.peers_only)
        return 0
    deadline = time.time() + args.budget_s
    import torch
    if not torch.cuda.is_available():
        emit({"suite": "cuda", "case": "llama3_8b", "status": "skipped", "reason": "no GPU visible to PyTorch"})
        return 0
    config = dict(LLAMA3_8B)
    if args.quick:
        config["num_hidden_layers"] = 2
        args.model_dir += "-2layers"
    model_dir = Path(args.model_dir)
    case = "llama3_8b" + ("_2layers" if args.quick else "")

    t0 = time.perf_counter()
    write_model(model_dir, config)
    log(f"model ready in {time.perf_counter() - t0:.1f} s ({model_dir})")
    prompt = prompt_text(model_dir, PROMPT_TOKENS)
    bw = copy_bandwidth_tbs()
    # A decode step reads every weight once except the embedding table (one row of it).
    weight_bytes = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    weight_bytes -= (config["vocab_size"] - 1) * config["hidden_size"] * 2
    kv_bytes = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * PROMPT_TOKENS * 2
    floor_ms = (weight_bytes + kv_bytes) / (bw * 1e12) * 1e3
    emit({"suite": "cuda", "case": "copy_bandwidth", "value": round(bw, 3), "unit": "TB/s", "better": "higher"})

    ours, error = {}, None
    # Our two processes get at most 55% of what is left; the peers the rest.
    ours_deadline = time.time() + 0.55 * (deadline - time.time())
    with tempfile.TemporaryDirectory(prefix="luminal_cuda_cache_") as cache:
        try:
            # The cold process also reads 16 GB of weights (about 20 s); the warm one needs
            # about 35 s in all.
            cold = luminal_run(Path(args.bin), model_dir, prompt, Path(cache), args.search_seconds,
                               0.75 * (ours_deadline - time.time()))
            log(f"luminal cold: {cold}")
            ours = {"cold": cold}
            warm = luminal_run(Path(args.bin), model_dir, prompt, Path(cache), args.search_seconds,
                               ours_deadline - time.time())
            log(f"luminal warm: {warm}")
            ours["warm"] = warm
            for spec in args.variant_env:
                extra = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)
                try:
                    ours.setdefault("variants", {})[spec] = luminal_run(
                        Path(args.bin), model_dir, prompt, Path(cache), args.search_seconds,
                        ours_deadline - time.time(), extra_env=extra)
                    log(f"luminal warm with {spec}: {ours['variants'][spec]}")
                except Exception as e:  # noqa: BLE001 - a variant's failure is reported, not fatal
                    log(f"luminal warm with {spec} failed: {type(e).__name__}: {e}"[:2000])
        except Exception as e:  # noqa: BLE001 - the peers still run and the failure is printed
            error = f"{type(e).__name__}: {e}"[:2000]
            log(error)
    peers, notes = run_peers(model_dir, prompt, deadline) if time.time() < deadline - 30 else ({}, ["no time left"])
    log(f"peers: {peers} {notes}")

    def line(name, value, unit, peer_map, **extra):
        row = {"suite": "cuda", "case": f"{case}_{name}", "value": value, "unit": unit, "better": "lower"}
        peer_map = {k: round(v, 4) for k, v in peer_map.items() if v is not None}
        if peer_map:
            row["peers"] = peer_map
            if value:
                row["ratio_vs_best_peer"] = round(min(peer_map.values()) / value, 4)
        if error:
            row["status"], row["error"] = "failed", error
        row.update(extra)
        if notes:
            row["peer_notes"] = notes
        emit(row)

    warm = ours.get("warm", ours.get("cold", {}))
    tpot = warm.get("tpot_ms")
    line("decode_tpot_ctx512", tpot, "ms", {"torch_eager": peers.get("tpot_eager"),
                                            "torch_compile_reduce_overhead": peers.get("tpot_compile")},
         fraction_of_floor=round(floor_ms / tpot, 4) if tpot else None, floor_ms=round(floor_ms, 3),
         tpot_split=warm.get("tpot_split"), target="<= 1.15x floor and >= 1.3x faster than torch.compile")
    line("ttft_prompt512", warm.get("ttft_ms"), "ms", {"torch_eager": peers.get("ttft_eager"),
                                                       "torch_compile": peers.get("ttft_compile")},
         prompt_tokens=warm.get("prompt_tokens"), ttft_first_prompt_ms=warm.get("ttft_first_ms"),
         ttft_second_prompt_ms=warm.get("ttft_second_ms"),
         target="<= 12 ms and faster than torch.compile")
    for spec, v in ours.get("variants", {}).items():
        vt = v.get("tpot_ms")
        emit({"suite": "cuda", "case": f"{case}_decode_tpot_ctx512_variant", "variant": spec, "value": vt,
              "unit": "ms", "better": "lower", "fraction_of_floor": round(floor_ms / vt, 4) if vt else None,
              "ttft_ms": v.get("ttft_ms"), "default_tpot_ms": tpot, "compile_ms": v.get("compile_ms"),
              "verification_rejections": v.get("verification_rejections")})
    compile_peer = peers.get("compile_s_torch")
    cold = ours.get("cold", {})
    cold_s = cold["compile_ms"] / 1e3 if cold.get("compile_ms") else None
    line("compile_cold", cold_s, "s", {"torch_compile_first_call": compile_peer}, target="<= 15 s",
         process_wall_s=cold.get("wall_s"), compile_report=cold.get("compile_report"),
         verification_rejections=cold.get("verification_rejections"))
    warm_s = ours["warm"]["compile_ms"] / 1e3 if ours.get("warm", {}).get("compile_ms") else None
    line("compile_warm", warm_s, "s", {"torch_compile_first_call": compile_peer}, target="<= 2 s",
         process_wall_s=ours.get("warm", {}).get("wall_s"), compile_report=ours.get("warm", {}).get("compile_report"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
