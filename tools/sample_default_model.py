#!/usr/bin/env python3
"""Load models/default with transformers and print greedy and sampled generations.

Usage: python tools/sample_default_model.py [--model models/default] [--n 3] [--seed 0]
"""
from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/default")
    ap.add_argument("--n", type=int, default=3, help="number of sampled fortunes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--prompt", action="append", default=None,
                    help="prompt for the greedy generations (repeatable)")
    args = ap.parse_args()
    torch.set_num_threads(2)

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{type(model).__name__}: {n_params} parameters, vocab {tok.vocab_size + len(tok.added_tokens_decoder) - 2}")

    prompts = args.prompt or ["A computer", "Q: Why"]
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids  # the tokenizer's post-processor adds BOS
        out = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        print(f"--- greedy, prompt {p!r}\n{tok.decode(out[0], skip_special_tokens=True)}")

    torch.manual_seed(args.seed)
    bos = torch.tensor([[tok.bos_token_id]])
    for i in range(args.n):
        out = model.generate(bos, max_new_tokens=args.max_new_tokens, do_sample=True, temperature=0.8,
                             top_k=40, top_p=0.95, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        print(f"--- sample {i + 1} (seed {args.seed}, temperature 0.8, top-k 40, top-p 0.95)\n"
              f"{tok.decode(out[0], skip_special_tokens=True)}")


if __name__ == "__main__":
    main()
