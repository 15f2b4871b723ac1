"""Half-precision compute (`luminal debug-logits --dtype bf16|f16`) against transformers.

Each test builds a tiny random-weight model like test_models.py, then runs it in luminal's
reference interpreter with compute dtype BF16 (or F16) and in transformers loaded with
torch_dtype=bfloat16 (float16), eager attention, on the CPU.

Tolerances. Both sides round every activation to 8 significant bits (BF16; F16: 11), but
not at identical points of their arithmetic: a matmul accumulates in a different order
(and luminal's reference rounds the products to BF16 before summing), so a value may
land one rounding step (2^-8 relative for BF16) away, and that difference propagates
through the layers. So the logits are compared in units of the logits' own scale:
  - |luminal - hf_bf16| <= REL_TOL * max|hf logits| for every row (REL_TOL = 3% for BF16,
    about 8 rounding steps of 2^-8; 0.6% for F16; measured on these models: 1.0-1.5% and
    0.16%, the distance two BF16 runs with different accumulation orders reach),
  - luminal's distance from the F32 truth is at most 2x (+ one rounding step) transformers'
    own BF16 distance from it: luminal computes no worse than torch does in BF16,
  - and it is clearly non-zero: the graph really computes in BF16, not F32.
Greedy tokens must agree at every step whose top-2 logit margin (in transformers) exceeds
TOKEN_STEPS rounding steps of the logit scale (twice the typical difference measured
between the two sides, well inside REL_TOL, so this is a check of its own). Steps with a
smaller margin are skipped (either token is a fair BF16 answer there); transformers is fed
luminal's tokens, so the sequences never diverge. At least MIN_TOKENS steps must compare.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from test_models import (PROMPT, gemma3_config, llama_config, luminal, qwen3_config,  # noqa: F401 (fixture)
                         save_model)

REL_TOL = {"bf16": 0.03, "f16": 0.006}
ROUNDING = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}
TOKEN_STEPS = 8
MIN_TOKENS = 3
TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def debug_logits(luminal: Path, model_dir: Path, ids: list[int], steps: int, dtype: str,
                 device: str = "reference") -> dict:
    proc = subprocess.run(
        [str(luminal), "debug-logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
         "--steps", str(steps), "--device", device, "--dtype", dtype],
        capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hf_logits(model_dir: Path, dtype: str, ids: list[int], forced: list[int]) -> list[np.ndarray]:
    """Prefill logits rows, then one row per decode step feeding `forced` tokens (HF KV cache)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=TORCH_DTYPE[dtype], attn_implementation="eager").eval()
    rows = []
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        rows.extend(out.logits[0].float().numpy())
        cache = out.past_key_values
        for tok in forced:
            out = model(torch.tensor([[tok]]), cache=cache, use_cache=True)
            cache = out.past_key_values
            rows.append(out.logits[0, -1].float().numpy())
    return rows


def compare_half(luminal: Path, model_dir: Path, dtype: str = "bf16", ids=PROMPT, steps: int = 6) -> dict:
    ours = debug_logits(luminal, model_dir, ids, steps, dtype)
    assert ours["compute_dtype"] == dtype.upper()
    # luminal's greedy tokens drive both sides, so every row compares the same inputs.
    forced = ours["generated"][:steps]
    got = [np.array(r, dtype=np.float64) for r in ours["prefill_logits"]] + \
          [np.array(r, dtype=np.float64) for r in ours["step_logits"]]
    half = hf_logits(model_dir, dtype, ids, forced)
    full = hf_logits(model_dir, "f32", ids, forced)
    assert len(got) == len(half) == len(full)
    scale = max(float(np.abs(r).max()) for r in full)
    tol = REL_TOL[dtype] * scale
    err_half = max(float(np.abs(g - h).max()) for g, h in zip(got, half))
    ours_vs_f32 = max(float(np.abs(g - f).max()) for g, f in zip(got, full))
    torch_vs_f32 = max(float(np.abs(h - f).max()) for h, f in zip(half, full))
    print(f"{model_dir.name} {dtype}: logit scale {scale:.3g}; |luminal - hf_{dtype}| {err_half:.3g} "
          f"(tol {tol:.3g}); vs F32: luminal {ours_vs_f32:.3g}, torch {torch_vs_f32:.3g}")
    assert err_half <= tol, f"max abs logit error vs transformers {dtype}: {err_half} > {tol}"
    assert ours_vs_f32 <= 2 * torch_vs_f32 + ROUNDING[dtype] * scale, \
        f"luminal {dtype} is further from F32 ({ours_vs_f32}) than 2x torch's {dtype} ({torch_vs_f32})"
    assert ours_vs_f32 > 0.1 * ROUNDING[dtype] * scale, "the logits equal F32's: not computed in half precision"

    # Greedy agreement: the next token after the prompt and after each forced step.
    last_rows = [half[len(ids) - 1]] + half[len(ids):]
    margin = TOKEN_STEPS * ROUNDING[dtype] * scale
    compared = 0
    for i, row in enumerate(last_rows):
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] <= margin:
            continue
        assert int(row.argmax()) == ours["generated"][i], f"greedy token {i} differs (margin {top2[1] - top2[0]:.3g})"
        compared += 1
    print(f"  greedy tokens agree at {compared} of {len(last_rows)} steps (those with a margin > {margin:.3g})")
    assert compared >= MIN_TOKENS, f"only {compared} steps have a top-2 margin above {margin:.3g} to compare"
    return {"err": err_half, "tol": tol, "compared": compared}


def test_llama3_bf16(luminal, tmp_path):
    compare_half(luminal, save_model(transformers.LlamaForCausalLM, llama_config(), tmp_path / "llama3"))


def test_llama_bias_tied_bf16_checkpoint(luminal, tmp_path):
    """BF16 storage (kept as is), biases, tied embeddings, head_dim != hidden / heads."""
    cfg = llama_config(tie_word_embeddings=True, attention_bias=True, mlp_bias=True, head_dim=32,
                       num_key_value_heads=1, rope_scaling=None, rope_theta=10000.0)
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(cfg).eval()
    from test_models import randomize
    randomize(model)
    d = tmp_path / "llama_tied_bf16"
    model.to(torch.bfloat16).save_pretrained(d)
    compare_half(luminal, d)


def test_qwen3_bf16(luminal, tmp_path):
    cfg = qwen3_config(use_sliding_window=True, sliding_window=3, max_window_layers=1, num_hidden_layers=3,
                       tie_word_embeddings=False)
    compare_half(luminal, save_model(transformers.Qwen3ForCausalLM, cfg, tmp_path / "qwen3"))


def test_gemma3_bf16(luminal, tmp_path):
    d = save_model(transformers.Gemma3ForCausalLM, gemma3_config(), tmp_path / "gemma3", unit_norms=False)
    compare_half(luminal, d)


def test_llama3_f16(luminal, tmp_path):
    compare_half(luminal, save_model(transformers.LlamaForCausalLM, llama_config(), tmp_path / "llama3"), "f16")


def test_dtype_f32_is_the_default(luminal, tmp_path):
    """--dtype f32 and auto (on a non-CUDA device) give bit-identical logits: the same graph."""
    d = save_model(transformers.LlamaForCausalLM, llama_config(num_hidden_layers=1), tmp_path / "llama1")
    a = debug_logits(luminal, d, PROMPT[:4], 2, "f32")
    b = debug_logits(luminal, d, PROMPT[:4], 2, "auto")
    assert a["compute_dtype"] == b["compute_dtype"] == "F32"
    assert a["prefill_logits"] == b["prefill_logits"] and a["step_logits"] == b["step_logits"]


def test_dtype_errors(luminal, tmp_path):
    d = save_model(transformers.LlamaForCausalLM, llama_config(num_hidden_layers=1), tmp_path / "llama1")
    for sub in (["debug-logits", "--model", str(d), "--ids", "1"], ["generate", "--model", str(d), "--prompt", "x"]):
        proc = subprocess.run([str(luminal), *sub, "--dtype", "int8"], capture_output=True, text=True)
        assert proc.returncode != 0
        assert "--dtype: unknown dtype 'int8' (f32, bf16, f16 or auto)" in proc.stderr, proc.stderr


def test_generate_reports_compute_dtype(luminal):
    default_model = Path(__file__).resolve().parents[2] / "models" / "default"
    proc = subprocess.run([str(luminal), "generate", "--model", str(default_model), "--prompt", "The",
                           "--max-tokens", "4", "--device", "reference", "--dtype", "bf16"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "reference backend, BF16 compute" in proc.stdout
    assert proc.stdout.startswith("The")
