"""Hugging Face parity of luminal's model library (Llama 3, Qwen 3, Gemma 3).

Each test builds a tiny model with `transformers` from a seeded random init (no
downloads), saves it with save_pretrained (safetensors) into a temporary directory and
runs `luminal debug-logits` on it: the prefill logits of every prompt position and the
logits of 10 greedy decode steps (through luminal's KV cache, one compiled graph) must
match transformers' eager F32 forward within 1e-4, and the greedy token ids must be
identical.

The luminal binary is $LUMINAL_BIN_DIR/models/luminal (default build/release), or
$LUMINAL_BIN.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import numpy as np  # noqa: E402  (a missing dependency fails the run, it never skips it)
import torch  # noqa: E402
import transformers  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
ATOL = 1e-4
PROMPT = [3, 17, 42, 5, 99, 64, 7, 120, 11]


@pytest.fixture(scope="module")
def luminal() -> Path:
    if os.environ.get("LUMINAL_BIN"):
        path = Path(os.environ["LUMINAL_BIN"])
    else:
        bin_dir = Path(os.environ.get("LUMINAL_BIN_DIR", REPO_ROOT / "build" / "release"))
        path = bin_dir / "models" / "luminal"
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"luminal CLI not found at {path}: build it or set LUMINAL_BIN_DIR")
    return path


def randomize(model, std: float = 0.08, unit_norms: bool = True) -> None:
    """Seeded random weights that give peaked (not uniform) next-token distributions."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                # Llama/Qwen scale by w, Gemma by (1 + w): both around 1, not exactly.
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if unit_norms else 0.0))
            elif "embed_tokens" in name:
                p.normal_(0.0, 1.0 if unit_norms else 0.15)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
            else:
                p.normal_(0.0, std)


def save_model(cls, config, path: Path, seed: int = 0, unit_norms: bool = True, **save_kwargs) -> Path:
    torch.manual_seed(seed)
    model = cls(config).eval()
    randomize(model, unit_norms=unit_norms)
    model.save_pretrained(path, **save_kwargs)
    return path


def run_debug_logits(luminal: Path, model_dir: Path, ids: list[int], steps: int) -> dict:
    proc = subprocess.run(
        [str(luminal), "debug-logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
         "--steps", str(steps)],
        capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hf_reference(model_dir: Path, ids: list[int], steps: int):
    """Prefill logits, per-step greedy decode logits (with HF's KV cache) and the ids."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        prefill = out.logits[0].numpy()
        cache = out.past_key_values
        nxt = int(prefill[-1].argmax())
        generated, step_logits = [nxt], []
        for _ in range(steps):
            out = model(torch.tensor([[nxt]]), cache=cache, use_cache=True)
            cache = out.past_key_values
            row = out.logits[0, -1].numpy()
            step_logits.append(row)
            nxt = int(row.argmax())
            generated.append(nxt)
    return prefill, step_logits, generated


def compare(luminal: Path, model_dir: Path, ids=PROMPT, steps: int = 10, atol: float = ATOL) -> float:
    """Run both sides; assert parity; return the max abs logit error."""
    ours = run_debug_logits(luminal, model_dir, ids, steps)
    prefill, step_logits, generated = hf_reference(model_dir, ids, steps)
    got = np.array(ours["prefill_logits"], dtype=np.float64)
    assert got.shape == prefill.shape
    err = float(np.abs(got - prefill).max())
    for i, row in enumerate(step_logits):
        step_err = float(np.abs(np.array(ours["step_logits"][i]) - row).max())
        err = max(err, step_err)
        assert step_err <= atol, f"decode step {i}: max abs logit error {step_err}"
    assert err <= atol, f"max abs logit error {err}"
    assert ours["generated"] == generated
    print(f"{model_dir.name}: max abs logit error {err:.3g}; timing {ours['timing']}")
    return err


def llama_config(**kw):
    base = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                bos_token_id=1, eos_token_id=2)
    base.update(kw)
    return transformers.LlamaConfig(**base)


def qwen3_config(**kw):
    base = dict(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                rope_theta=1000000.0, tie_word_embeddings=True)
    base.update(kw)
    return transformers.Qwen3Config(**base)


def gemma3_config(**kw):
    base = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                query_pre_attn_scalar=24, sliding_window=4,
                layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                rope_scaling={"rope_type": "linear", "factor": 8.0}, rope_theta=1000000.0,
                rope_local_base_freq=10000.0, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    base.update(kw)
    return transformers.Gemma3TextConfig(**base)


# ---- parity per architecture ------------------------------------------------------------------

def test_llama3(luminal, tmp_path):
    d = save_model(transformers.LlamaForCausalLM, llama_config(), tmp_path / "llama3")
    compare(luminal, d)


def test_llama_tied_bias_headdim(luminal, tmp_path):
    cfg = llama_config(tie_word_embeddings=True, attention_bias=True, mlp_bias=True, head_dim=32,
                       num_key_value_heads=1, rope_scaling=None, rope_theta=10000.0)
    d = save_model(transformers.LlamaForCausalLM, cfg, tmp_path / "llama_tied")
    compare(luminal, d)


def test_qwen3(luminal, tmp_path):
    d = save_model(transformers.Qwen3ForCausalLM, qwen3_config(), tmp_path / "qwen3")
    compare(luminal, d)


def test_qwen3_sliding_window(luminal, tmp_path):
    cfg = qwen3_config(use_sliding_window=True, sliding_window=3, max_window_layers=1, num_hidden_layers=3,
                       tie_word_embeddings=False)
    d = save_model(transformers.Qwen3ForCausalLM, cfg, tmp_path / "qwen3_sw")
    compare(luminal, d)


def test_gemma3(luminal, tmp_path):
    d = save_model(transformers.Gemma3ForCausalLM, gemma3_config(), tmp_path / "gemma3", unit_norms=False)
    compare(luminal, d)


def test_gemma3_no_softcap_pattern(luminal, tmp_path):
    """Legacy config keys: sliding_window_pattern, rope_local_base_freq, rope_scaling."""
    cfg = gemma3_config(attn_logit_softcapping=None, final_logit_softcapping=None, layer_types=None,
                        sliding_window_pattern=2, rope_scaling=None, num_hidden_layers=3)
    d = save_model(transformers.Gemma3ForCausalLM, cfg, tmp_path / "gemma3_legacy", unit_norms=False)
    # Rewrite config.json in the older (transformers 4.x) layout, which both sides must read.
    c = json.loads((d / "config.json").read_text())
    rp = c.pop("rope_parameters")
    c.pop("layer_types", None)
    c.pop("_sliding_window_pattern", None)
    c["sliding_window_pattern"] = 2
    c["rope_theta"] = rp["full_attention"]["rope_theta"]
    c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
    c["rope_scaling"] = None
    (d / "config.json").write_text(json.dumps(c, indent=2))
    compare(luminal, d)


def test_gemma3_conditional_generation_text(luminal, tmp_path):
    """Gemma3ForConditionalGeneration (the 4B+ checkpoints): its text model, vision tower ignored."""
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14)
    cfg = transformers.Gemma3Config(text_config=gemma3_config().to_dict(), vision_config=vision,
                                    mm_tokens_per_image=4, image_token_index=250, boi_token_index=251,
                                    eoi_token_index=252)
    d = save_model(transformers.Gemma3ForConditionalGeneration, cfg, tmp_path / "gemma3_mm", unit_norms=False)
    compare(luminal, d)
    # The other naming of the text weights: "model.language_model.*" instead of "language_model.model.*".
    from safetensors.torch import load_file, save_file
    tensors = load_file(d / "model.safetensors")
    renamed = {k.replace("language_model.model.", "model.language_model.", 1): v for k, v in tensors.items()}
    assert renamed.keys() != tensors.keys()
    save_file(renamed, d / "model.safetensors", metadata={"format": "pt"})
    compare(luminal, d)


def test_llama_sharded_bf16(luminal, tmp_path):
    """Several shards with model.safetensors.index.json, bf16 storage (computed in F32)."""
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(llama_config()).eval()
    randomize(model)
    model = model.to(torch.bfloat16)
    d = tmp_path / "llama_sharded"
    model.save_pretrained(d, max_shard_size="100KB")
    assert (d / "model.safetensors.index.json").exists()
    assert len(list(d.glob("*.safetensors"))) > 1
    compare(luminal, d)


# ---- one layer at full Llama-3-8B width --------------------------------------------------------

@pytest.mark.slow
def test_llama3_8b_width_one_layer(luminal, tmp_path):
    """hidden 4096, 32 heads, 8 KV heads, intermediate 14336, one layer, small vocab."""
    cfg = llama_config(hidden_size=4096, intermediate_size=14336, num_hidden_layers=1, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=256, max_position_embeddings=131072,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    d = save_model(transformers.LlamaForCausalLM, cfg, tmp_path / "llama3_8b_layer")
    start = time.time()
    compare(luminal, d, ids=[128, 9, 77, 200], steps=2)
    print(f"8B-width layer parity in {time.time() - start:.1f} s")


# ---- the shipped default model and the generate CLI ---------------------------------------------

DEFAULT_MODEL = REPO_ROOT / "models" / "default"


def test_default_model_parity(luminal):
    compare(luminal, DEFAULT_MODEL, ids=[0, 40, 41, 42, 43], steps=10)


def test_generate_cli(luminal):
    proc = subprocess.run([str(luminal), "generate", "--model", str(DEFAULT_MODEL), "--prompt", "The",
                           "--max-tokens", "8"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    for key in ("TTFT:", "TPOT:", "tokens/s:"):
        assert key in proc.stdout
    assert proc.stdout.startswith("The")
    # Sampling with a seed is reproducible.
    args = [str(luminal), "generate", "--model", str(DEFAULT_MODEL), "--prompt", "A", "--max-tokens", "6",
            "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "7"]
    a = subprocess.run(args, capture_output=True, text=True, timeout=600)
    b = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert a.returncode == 0, a.stderr
    assert a.stdout.split("\n\n")[0] == b.stdout.split("\n\n")[0]


def test_cli_errors(luminal, tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["MambaForCausalLM"], "hidden_size": 8}')
    proc = subprocess.run([str(luminal), "debug-logits", "--model", str(tmp_path), "--ids", "1"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "unsupported architecture 'MambaForCausalLM'" in proc.stderr
