#!/usr/bin/env python3
"""Train luminal's small default model: a byte-level BPE tokenizer and a tiny
LlamaForCausalLM on the Debian `fortunes` corpus, on CPU, in bounded time.

Usage:
    python tools/train_default_model.py [--out models/default] [--minutes 12]

Writes a Hugging Face model directory (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, generation_config.json) plus
training_log.json with the recipe and the final losses.
Everything is seeded; the only source of run-to-run variation is the
wall-clock budget, which decides the number of optimizer steps (pass --steps N
to reproduce a run exactly: training_log.json records N).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
# The Llama 3 pre-tokenizer split pattern (also used, with \p{N} instead of
# \p{N}{1,3}, by Qwen 2).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def read_fortunes(root: Path) -> list[str]:
    docs: list[str] = []
    for f in sorted(root.iterdir()):
        if not f.is_file() or f.is_symlink() or f.suffix in (".dat", ".u8") or "." in f.name:
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        cur: list[str] = []
        for line in text.split("\n"):
            if line.strip() == "%":
                doc = "\n".join(cur).strip("\n").rstrip()
                if doc.strip():
                    docs.append(doc)
                cur = []
            else:
                cur.append(line.rstrip())
        doc = "\n".join(cur).strip("\n").rstrip()
        if doc.strip():
            docs.append(doc)
    return docs


def train_tokenizer(docs: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A:0",
        pair=f"{BOS} $A:0 {BOS}:1 $B:1",
        special_tokens=[(BOS, bos_id)],
    )
    return tok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default="models/default")
    ap.add_argument("--minutes", type=float, default=12.0, help="wall-clock budget for the LM training loop")
    ap.add_argument("--steps", type=int, default=None,
                    help="fixed number of optimizer steps (default: as many as fit in --minutes)")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    t_start = time.time()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    docs = read_fortunes(Path(args.corpus))
    rng = random.Random(args.seed)
    rng.shuffle(docs)
    n_val = max(1, len(docs) // 50)
    val_docs, train_docs = docs[:n_val], docs[n_val:]
    print(f"corpus: {len(docs)} fortunes ({sum(map(len, docs))} chars); train {len(train_docs)}, val {len(val_docs)}", flush=True)

    # ---- tokenizer ------------------------------------------------------------------
    tok = train_tokenizer(train_docs, args.vocab)
    vocab_size = tok.get_vocab_size()
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    print(f"tokenizer: vocab {vocab_size}, bos {bos_id}, eos {eos_id}", flush=True)

    def encode_docs(ds: list[str]) -> np.ndarray:
        enc = tok.encode_batch(ds, add_special_tokens=False)
        ids: list[int] = []
        for e in enc:
            ids.append(bos_id)
            ids.extend(e.ids)
            ids.append(eos_id)
        return np.asarray(ids, dtype=np.int64)

    train_ids = torch.from_numpy(encode_docs(train_docs))
    val_ids = torch.from_numpy(encode_docs(val_docs))
    print(f"tokens: train {len(train_ids)}, val {len(val_ids)} "
          f"({sum(map(len, train_docs)) / len(train_ids):.2f} chars/token)", flush=True)

    # ---- model ----------------------------------------------------------------------
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=3 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=512,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=args.lr, betas=(0.9, 0.95))

    gen = torch.Generator().manual_seed(args.seed)

    def batch(data: torch.Tensor, bs: int, g: torch.Generator) -> torch.Tensor:
        starts = torch.randint(0, len(data) - args.seq - 1, (bs,), generator=g)
        return torch.stack([data[s:s + args.seq] for s in starts.tolist()]).to(args.device)

    # Fixed validation chunks (non-overlapping windows over the val stream).
    n_val_chunks = max(1, min(64, (len(val_ids) - 1) // args.seq))
    val_batch = torch.stack([val_ids[i * args.seq:(i + 1) * args.seq] for i in range(n_val_chunks)]).to(args.device)

    @torch.no_grad()
    def eval_loss(x: torch.Tensor) -> float:
        model.eval()
        losses = []
        for i in range(0, len(x), 16):
            xb = x[i:i + 16]
            losses.append(model(input_ids=xb, labels=xb).loss.item() * len(xb))
        model.train()
        return sum(losses) / len(x)

    # Schedule: linear warm-up, then cosine decay to 10% over the run's progress. Progress is
    # step / --steps when --steps is given (exactly reproducible), else elapsed / budget, so
    # the loop always ends within the wall-clock budget even on a busy shared machine.
    budget = args.minutes * 60.0
    warmup = 30
    min_lr_frac = 0.1
    step = 0
    t_loop = time.time()
    log = []
    train_loss_ema = None
    model.train()
    while True:
        elapsed = time.time() - t_loop
        progress = step / args.steps if args.steps else elapsed / budget
        if progress >= 1.0:
            break
        if step < warmup:
            lr = args.lr * (step + 1) / warmup
        else:
            lr = args.lr * (min_lr_frac + (1 - min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        xb = batch(train_ids, args.batch, gen)
        loss = model(input_ids=xb, labels=xb).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        li = loss.item()
        train_loss_ema = li if train_loss_ema is None else 0.95 * train_loss_ema + 0.05 * li
        step += 1
        if step % 100 == 0:
            vl = eval_loss(val_batch)
            log.append({"step": step, "train_loss": train_loss_ema, "val_loss": vl, "lr": lr,
                        "elapsed_s": time.time() - t_loop})
            print(f"step {step}: train {train_loss_ema:.3f} val {vl:.3f} lr {lr:.2e} "
                  f"({time.time() - t_loop:.0f}s)", flush=True)
    train_time = time.time() - t_loop

    # Final losses: train measured on 64 fixed random train chunks, val on the val chunks.
    g2 = torch.Generator().manual_seed(args.seed + 1)
    final_train = eval_loss(batch(train_ids, 64, g2))
    final_val = eval_loss(val_batch)
    print(f"final: train loss {final_train:.4f}, val loss {final_val:.4f}, {step} steps, {train_time:.0f}s", flush=True)

    # ---- save -----------------------------------------------------------------------
    model.eval()
    model.to("cpu").save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)
    fast.model_max_length = 512
    fast.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))  # the raw tokenizers-library file, unchanged
    GenerationConfig(
        bos_token_id=bos_id, eos_token_id=eos_id, do_sample=True, temperature=0.8, top_k=40,
        top_p=0.95, max_new_tokens=128,
    ).save_pretrained(out)
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        p = out / extra
        if p.exists():
            p.unlink()

    info = {
        "corpus": "Debian packages fortunes + fortunes-min (/usr/share/games/fortunes)",
        "num_docs": len(docs), "train_docs": len(train_docs), "val_docs": len(val_docs),
        "train_tokens": int(len(train_ids)), "val_tokens": int(len(val_ids)),
        "vocab_size": vocab_size, "parameters": n_params,
        "hyperparameters": {k: v for k, v in vars(args).items() if k not in ("out", "corpus")},
        "steps": step, "train_time_s": round(train_time, 1),
        "total_time_s": round(time.time() - t_start, 1),
        "final_train_loss": round(final_train, 4), "final_val_loss": round(final_val, 4),
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "log": log,
    }
    (out / "training_log.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "log"}, indent=2))


if __name__ == "__main__":
    main()
