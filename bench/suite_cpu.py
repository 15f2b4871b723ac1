#!/usr/bin/env python3
"""scripts/bench cpu: luminal's CPU backend against PyTorch eager, torch.compile (inductor)
and ONNX Runtime (CPUExecutionProvider) in the same run, all on CPU with the same thread
count (issue 9). Cases: an MLP, a Llama decoder block, softmax / layer_norm / rms_norm / GELU (erf, tanh), SGEMM
against OpenBLAS, and decode of a ~100M-parameter Llama against Hugging Face transformers.

luminal's numbers come from build/release/bench/suite_cpu (one case per invocation, a
fresh kernel cache directory each, so its first compile is cold). Every system runs on
the same inputs (written here to a safetensors file that luminal loads by name), and
luminal's output is compared with PyTorch eager's. One JSON object per line."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("LUMINAL_BIN_DIR", ROOT / "build" / "release")) / "bench" / "suite_cpu"
# LUMINAL_BENCH_THREADS overrides the thread count of every system; LUMINAL_BENCH_CPU_TIME=1
# times by process CPU time instead of wall time (on a shared machine, wall time measures
# the neighbours; with one thread, CPU time is the work), for luminal and the peers alike.
THREADS = int(os.environ.get("LUMINAL_BENCH_THREADS", "0")) or os.cpu_count() or 1
CPU_TIME = os.environ.get("LUMINAL_BENCH_CPU_TIME") == "1"
clock = time.process_time if CPU_TIME else time.perf_counter
REPS = int(os.environ.get("LUMINAL_BENCH_REPS", "10"))
DECODE_CONTEXT, DECODE_STEPS = 256, 8
# luminal's search budget per compile (candidates profiled, seconds): small, because the
# compile time is reported and the whole suite should finish in ~10 minutes on 2 cores.
SEARCH, SEARCH_TIME = 20, 20
# One luminal case (two compiles and the timed runs) gets this long; a case that runs
# away (a slow program kept by the search) is reported as failed instead of stalling.
CASE_TIMEOUT_S = int(os.environ.get("LUMINAL_BENCH_CASE_TIMEOUT", "300"))
# The compile's verification against the unrewritten program (auto) rejects F32 GEMMs whose
# sums over long k differ from the double-accumulated loops by more than its per-element
# tolerance on its large random inputs (docs/CPU_BACKEND.md); "never" keeps the searched
# program, and the suite checks every output against PyTorch itself.
VERIFY = os.environ.get("LUMINAL_BENCH_VERIFY", "never")

os.environ["LUMINAL_NUM_THREADS"] = str(THREADS)
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(THREADS)
WORK = Path(tempfile.mkdtemp(prefix="luminal_bench_cpu_"))


def median_ms(fn, reps=REPS):
    """Median over `reps` samples after two warm-up calls and 0.3 s of warm-up (as luminal's
    side, bench/suite_cpu.cpp); each sample repeats `fn` for ~5 ms."""
    fn()
    fn()
    warm = time.perf_counter()
    while time.perf_counter() - warm < 0.3:
        fn()
    t = clock()
    fn()
    once = clock() - t
    inner = min(1000, max(1, int(0.005 / max(once, 1e-7))))
    samples = []
    for _ in range(reps):
        t = clock()
        for _ in range(inner):
            fn()
        samples.append(1e3 * (clock() - t) / inner)
    return statistics.median(samples)


def run_luminal(case, *args):
    """luminal's half of a case, with a kernel cache directory of its own (cold compile)."""
    cache = tempfile.mkdtemp(prefix=f"cache_{case}_", dir=WORK)
    env = dict(os.environ, LUMINAL_CACHE_DIR=cache)
    cmd = [str(BIN), "--case", case, "--reps", str(REPS), "--search", str(SEARCH), "--search-time", str(SEARCH_TIME),
           "--verify", VERIFY, *map(str, args)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CASE_TIMEOUT_S} s (compiles and timed runs)"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip() or f"exit status {proc.returncode}")[-600:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def emit(case, lum, peers, target=1.0, **extra):
    line = {"suite": "cpu", "case": case, "value": None, "unit": "ms", "better": "lower", "target": target}
    if "error" in lum:
        line.update(status="failed", reason=lum["error"])
    else:
        line["value"] = round(lum["luminal_ms"], 4)
    ran = {k: round(v, 4) for k, v in peers.items() if isinstance(v, float)}
    line["peers"] = ran
    failed = {k: v for k, v in peers.items() if not isinstance(v, float)}
    if failed:
        line["peers_failed"] = failed
    if ran and line["value"]:
        line["ratio_vs_best_peer"] = round(min(ran.values()) / line["value"], 4)
    for key in ("compile_s_cold", "compile_s_warm"):
        if key in lum:
            line[key] = round(lum[key], 3)
    line["threads"] = THREADS
    line["clock"] = "process_cpu" if CPU_TIME else "wall"
    line["load_avg_1m"] = round(os.getloadavg()[0], 2)  # a shared machine makes every number noisy
    line["search_budget"] = {"candidates": SEARCH, "seconds": SEARCH_TIME}
    line["verify"] = VERIFY
    line.update(extra)
    if "error" not in lum:
        line["luminal"] = {k: lum[k] for k in ("candidates", "search_s", "kernels_compiled", "weights_dtype", "prefill_ms")
                           if k in lum}
    print(json.dumps(line), flush=True)


# ---- the peers -------------------------------------------------------------------------


def time_peers(module, inputs, onnx_name):
    """PyTorch eager, inductor (compile excluded, warmed up) and ONNX Runtime on `module`."""
    peers, extra = {}, {}
    module = module.eval()
    with torch.inference_mode():
        peers["torch_eager"] = median_ms(lambda: module(*inputs))
        try:
            compiled = torch.compile(module)
            t = time.perf_counter()
            compiled(*inputs)
            extra["inductor_compile_s"] = round(time.perf_counter() - t, 2)
            peers["inductor"] = median_ms(lambda: compiled(*inputs))
        except Exception as err:  # a peer that cannot run is reported, not fatal
            peers["inductor"] = f"{type(err).__name__}: {err}"[:300]
    try:
        import onnxruntime as ort
        path = WORK / f"{onnx_name}.onnx"
        names = [f"in{i}" for i in range(len(inputs))]
        torch.onnx.export(module, tuple(inputs), str(path), input_names=names, opset_version=17, dynamo=False)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feed = {n: x.numpy() for n, x in zip(names, inputs)}
        peers["onnxruntime"] = median_ms(lambda: sess.run(None, feed))
        del sess
    except Exception as err:
        peers["onnxruntime"] = f"{type(err).__name__}: {err}"[:300]
    return peers, extra


def graph_case(case, module, inputs, tensors, **extra):
    """Write the inputs, run luminal (its output dumped), compare it with eager, time the peers."""
    from safetensors.torch import save_file
    weights = WORK / f"{case}.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(weights))
    dump = WORK / f"{case}.f32"
    lum = run_luminal(case, "--inputs", weights, "--dump", dump)
    with torch.inference_mode():
        want = module.eval()(*inputs).float().numpy().ravel()
    if "error" not in lum and dump.exists():
        got = np.fromfile(dump, dtype=np.float32)
        if got.size == want.size:
            extra["max_abs_diff_vs_torch"] = float(np.max(np.abs(got - want)))
        else:
            extra["max_abs_diff_vs_torch"] = f"output sizes differ: {got.size} vs {want.size}"
    peers, more = time_peers(module, inputs, case)
    emit(case, lum, peers, **extra, **more)


class Params(torch.nn.Module):
    """A module whose tensors are the named inputs luminal reads (so both run the same numbers)."""

    def __init__(self, tensors, runtime_inputs):
        super().__init__()
        self.names = {}
        for name, t in tensors.items():
            if name in runtime_inputs:
                continue
            key = name.replace(".", "_")
            self.register_buffer(key, t)
            self.names[name] = key

    def p(self, name):
        return getattr(self, self.names[name])


class MLP(Params):
    def forward(self, x):
        for layer in range(3):
            x = F.linear(x, self.p(f"l{layer}.weight"), self.p(f"l{layer}.bias"))
            if layer < 2:
                x = F.gelu(x)
        return x


def case_mlp():
    g = torch.Generator().manual_seed(1)
    t = {"x": torch.randn(64, 1024, generator=g)}
    for layer in range(3):
        t[f"l{layer}.weight"] = torch.randn(1024, 1024, generator=g) / 32
        t[f"l{layer}.bias"] = torch.randn(1024, generator=g) * 0.1
    graph_case("mlp", MLP(t, {"x"}), [t["x"]], t, shape="3 x Linear(1024,1024)+bias, exact GELU, batch 64, F32")


SEQ, HIDDEN, HEADS, KV_HEADS, INTER = 128, 1024, 16, 4, 2816
HEAD_DIM = HIDDEN // HEADS


class LlamaBlock(Params):
    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x):  # x: (seq, heads, head_dim); HF's rotate_half convention
        c, s = self.p("cos").unsqueeze(1), self.p("sin").unsqueeze(1)
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def forward(self, x):
        h = self.rms(x, self.p("ln1"))
        q = self.rope(F.linear(h, self.p("q")).view(SEQ, HEADS, HEAD_DIM)).transpose(0, 1)
        k = self.rope(F.linear(h, self.p("k")).view(SEQ, KV_HEADS, HEAD_DIM)).transpose(0, 1)
        v = F.linear(h, self.p("v")).view(SEQ, KV_HEADS, HEAD_DIM).transpose(0, 1)
        group = HEADS // KV_HEADS
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (heads, seq, head_dim)
        x = x + F.linear(a.transpose(0, 1).reshape(SEQ, HIDDEN), self.p("o"))
        n = self.rms(x, self.p("ln2"))
        return x + F.linear(F.silu(F.linear(n, self.p("gate"))) * F.linear(n, self.p("up")), self.p("down"))


def case_llama_block():
    g = torch.Generator().manual_seed(2)
    w = lambda *s: torch.randn(*s, generator=g) / s[-1] ** 0.5  # noqa: E731
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    freqs = torch.arange(SEQ).float().unsqueeze(1) * inv_freq.unsqueeze(0)
    t = {"x": torch.randn(SEQ, HIDDEN, generator=g), "cos": freqs.cos(), "sin": freqs.sin(),
         "ln1": 1 + 0.1 * torch.randn(HIDDEN, generator=g), "ln2": 1 + 0.1 * torch.randn(HIDDEN, generator=g),
         "q": w(HIDDEN, HIDDEN), "k": w(KV_HEADS * HEAD_DIM, HIDDEN), "v": w(KV_HEADS * HEAD_DIM, HIDDEN),
         "o": w(HIDDEN, HIDDEN), "gate": w(INTER, HIDDEN), "up": w(INTER, HIDDEN), "down": w(HIDDEN, INTER)}
    graph_case("llama_block", LlamaBlock(t, {"x"}), [t["x"]], t,
               shape="hidden 1024, 16 heads, 4 KV heads, SwiGLU 2816, RMSNorm, RoPE, causal; 128 tokens, F32")


class Softmax(Params):
    def forward(self, x):
        return torch.softmax(x, dim=1)


class LayerNorm(Params):
    def forward(self, x):
        return F.layer_norm(x, (4096,), self.p("weight"), self.p("bias"), 1e-5)


class Gelu(Params):
    def forward(self, x):
        return F.gelu(x)


class GeluTanh(Params):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


class RmsNorm(Params):
    def forward(self, x):
        return F.rms_norm(x, (4096,), self.p("weight"), 1e-5)


def case_elementwise():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4096, generator=g) * 3
    norm = {"x": x, "weight": 1 + 0.1 * torch.randn(4096, generator=g), "bias": torch.randn(4096, generator=g)}
    graph_case("softmax", Softmax({"x": x}, {"x"}), [x], {"x": x}, shape="(64, 4096) over the last dim, F32")
    graph_case("layer_norm", LayerNorm(norm, {"x"}), [x], norm, shape="(64, 4096), weight and bias, F32")
    graph_case("gelu", Gelu({"x": x}, {"x"}), [x], {"x": x}, shape="(64, 4096), exact (erf) GELU, F32")
    graph_case("gelu_tanh", GeluTanh({"x": x}, {"x"}), [x], {"x": x}, shape="(64, 4096), tanh GELU, F32")
    rms = {"x": x, "weight": norm["weight"]}
    graph_case("rms_norm", RmsNorm(rms, {"x"}), [x], rms, shape="(64, 4096), weight, F32")


def case_sgemm():
    """Against OpenBLAS's cblas_sgemm called directly (inside the C++ program)."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    from safetensors.torch import save_file
    path = WORK / "sgemm.safetensors"
    save_file({"a": a, "b": b}, str(path))
    dump = WORK / "sgemm.f32"
    lum = run_luminal("sgemm", "--inputs", path, "--dump", dump)
    extra = {"shape": "1024 x 1024 x 1024, row-major, F32"}
    peers = {}
    if "error" not in lum:
        peers["openblas"] = float(lum["openblas_ms"])
        extra["gemm_kernel_ms"] = lum["gemm_kernel_ms"]  # our GEMM called directly, no graph
        got = np.fromfile(dump, dtype=np.float32)
        extra["max_abs_diff_vs_torch"] = float(np.max(np.abs(got - (a @ b).numpy().ravel())))
    with torch.inference_mode():
        extra["torch_mm_ms"] = round(median_ms(lambda: a @ b), 4)  # for reference; not a ratio peer
    emit("sgemm", lum, peers, target=0.9, **extra)


# ---- decode ------------------------------------------------------------------------------


def hf_tpot(model, ids, compiled=False):
    """Median time of one greedy decode step after a prompt of len(ids) tokens (eager
    DynamicCache, or a StaticCache with torch.compile'd forward, compile excluded)."""
    from transformers import StaticCache
    steps = []
    forward = torch.compile(model.forward) if compiled else model.forward
    compile_s = None
    with torch.inference_mode():
        for rnd in range(2):  # round 0 warms up (and compiles)
            n = 3 if rnd == 0 else DECODE_STEPS
            cache = StaticCache(config=model.config, max_cache_len=len(ids[0]) + n + 8) if compiled else None
            pos = torch.arange(ids.shape[1])
            out = model(ids, past_key_values=cache, use_cache=True, cache_position=pos)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            p = ids.shape[1]
            for s in range(n):
                t = time.perf_counter()
                out = forward(nxt, past_key_values=past, use_cache=True, cache_position=torch.tensor([p]))
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                dt = time.perf_counter() - t
                past, p = out.past_key_values, p + 1
                if rnd == 0 and s == 0 and compiled:
                    compile_s = dt
                if rnd == 1:
                    steps.append(1e3 * dt)
    return statistics.median(steps), compile_s


def case_decode():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(5)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    model_dir = WORK / "llama_100m"
    model.save_pretrained(str(model_dir))
    lum = run_luminal("decode", "--model", model_dir, "--context", DECODE_CONTEXT, "--steps", DECODE_STEPS,
                      "--prefill", 1)
    ids = torch.randint(0, config.vocab_size, (1, DECODE_CONTEXT), generator=torch.Generator().manual_seed(6))
    peers, extra = {}, {}
    try:
        peers["hf_eager"], _ = hf_tpot(model, ids)
    except Exception as err:
        peers["hf_eager"] = f"{type(err).__name__}: {err}"[:300]
    try:
        peers["hf_inductor"], compile_s = hf_tpot(model, ids, compiled=True)
        extra["inductor_compile_s"] = round(compile_s, 2)
    except Exception as err:
        peers["hf_inductor"] = f"{type(err).__name__}: {err}"[:300]
    note = ("TPOT: median greedy decode step with 256 tokens in the KV cache, after a 256-token prefill (luminal: "
            "its prefill plan, luminal.prefill_ms). Both read the BF16 weights: HF computes in BF16, luminal "
            "converts them to F32 inside its GEMMs (activations F32)")
    emit("decode_llama_100m_tpot", lum, peers, params=params, note=note,
         shape="Llama: hidden 768, 12 layers, 12 heads, 4 KV heads, SwiGLU 2048, vocab 32000, tied embeddings",
         **extra)


CASES = {"mlp": case_mlp, "llama_block": case_llama_block, "elementwise": case_elementwise, "sgemm": case_sgemm,
         "decode": case_decode}


def main():
    if not BIN.exists():
        print(f"suite_cpu.py: {BIN} is not built", file=sys.stderr)
        return 1
    chosen = sys.argv[1:] or list(CASES)
    try:
        for name in chosen:
            CASES[name]()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)  # the model, inputs, kernel caches
    return 0


if __name__ == "__main__":
    sys.exit(main())
