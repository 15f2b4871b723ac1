"""Random view chains against PyTorch.

Each case is a random chain of slice (with steps), pad, squeeze, unsqueeze, permute,
transpose, expand, reshape and flip applied to random data (negatives, -0.0, inf, NaN,
odd sizes), run through `luminal_op_runner` (the real compile, with rewrites and a
small search, and the graph as built) and compared with the same chain in PyTorch.
Views move no data, so the comparison is bit for bit (NaN matches NaN, +0 != -0); the
second output, y * y, checks that an op reads the chained view correctly.

The seed changes every run (LUMINAL_VIEW_SEED fixes it) and is printed on failure.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("LUMINAL_BIN_DIR", REPO_ROOT / "build" / "release"))
RUNNER = BIN_DIR / "luminal_op_runner"
SEED = int(os.environ.get("LUMINAL_VIEW_SEED", time.time_ns() % (1 << 31)))
N_CASES = int(os.environ.get("LUMINAL_VIEW_CASES", 3000))
DTYPES = {"F32": torch.float32, "I32": torch.int32, "F16": torch.float16}


def random_data(shape, dtype, rng: random.Random):
    n = 1
    for d in shape:
        n *= d
    if dtype == torch.int32:
        vals = [rng.randint(-1000, 1000) for _ in range(n)]
        return torch.tensor(vals, dtype=dtype).reshape(shape)
    special = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1.5, 3.25]
    vals = [rng.choice(special) if rng.random() < 0.2 else rng.gauss(0, 10) for _ in range(n)]
    return torch.tensor(vals, dtype=torch.float64).to(dtype).reshape(shape)


def factorizations(n, rank, rng):
    """A random shape of `rank` dims whose product is n."""
    dims = []
    for _ in range(rank - 1):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        d = rng.choice(divisors)
        dims.append(d)
        n //= d
    dims.append(n)
    rng.shuffle(dims)
    return dims


def random_step(t: torch.Tensor, rng: random.Random):
    """One random view step: (json for the runner, the torch result), or None."""
    r = t.dim()
    kind = rng.choice(["slice", "slice", "pad", "squeeze", "unsqueeze", "permute", "transpose", "expand", "reshape",
                       "flip", "flip"])
    if kind == "slice" and r:
        ax = rng.randrange(r)
        n = t.shape[ax]
        start = rng.randrange(n + 1)
        end = rng.randrange(start, n + 1)
        step = rng.choice([1, 1, 2, 3])
        if (end == start or rng.random() < 0.3) and n:  # mostly non-empty; often one element (then squeezed)
            start = min(start, n - 1)
            end = start + 1
        idx = [slice(None)] * r
        idx[ax] = slice(start, end, step)
        return {"kind": "slice", "axis": ax - r if rng.random() < 0.3 else ax, "start": start, "end": end,
                "step": step}, t[tuple(idx)]
    if kind == "pad" and r:
        ax = rng.randrange(r)
        before, after = rng.randrange(3), rng.randrange(3)
        value = rng.choice([0.0, 0.0, -1.5, -0.0]) if t.dtype.is_floating_point else rng.choice([0, 7])
        pads = [0, 0] * (r - 1 - ax) + [before, after]
        return {"kind": "pad", "axis": ax, "before": before, "after": after,
                "value": value}, F.pad(t, pads, value=value)
    if kind == "squeeze" and r:
        ones = [d for d in range(r) if t.shape[d] == 1]
        ax = rng.choice(ones) if ones and rng.random() < 0.8 else rng.randrange(r)
        return {"kind": "squeeze", "axis": ax}, t.squeeze(ax)
    if kind == "unsqueeze" and r < 5:
        ax = rng.randrange(r + 1)
        return {"kind": "unsqueeze", "axis": ax}, t.unsqueeze(ax)
    if kind == "permute" and r:
        dims = list(range(r))
        rng.shuffle(dims)
        return {"kind": "permute", "dims": dims}, t.permute(dims)
    if kind == "transpose" and r >= 2:
        a, b = rng.sample(range(r), 2)
        return {"kind": "transpose", "dims": [a, b]}, t.transpose(a, b)
    if kind == "expand" and r:
        shape = [rng.choice([2, 3]) if d == 1 else d for d in t.shape]
        if rng.random() < 0.3:
            shape = [2] + shape
        return {"kind": "expand", "shape": shape}, t.expand(shape)
    if kind == "reshape" and t.numel() > 0:
        shape = factorizations(t.numel(), rng.randint(1, 3), rng)
        return {"kind": "reshape", "shape": shape}, t.reshape(shape)
    if kind == "flip" and r:
        dims = sorted(rng.sample(range(r), rng.randint(1, r)))
        return {"kind": "flip", "dims": dims}, t.flip(dims)
    return None


def make_cases():
    rng = random.Random(SEED)
    cases, inputs, want = [], {}, {}
    for k in range(N_CASES):
        name = rng.choice(list(DTYPES))
        dtype = DTYPES[name]
        shape = [rng.randint(1, 5) for _ in range(rng.randint(1, 4))]
        x = random_data(shape, dtype, rng)
        steps, y = [], x
        for _ in range(rng.randint(2, 7)):
            s = random_step(y, rng)
            if s is None or s[1].numel() > 4096:
                continue
            steps.append(s[0])
            y = s[1]
        cid = f"chain{k}"
        inputs[f"{cid}.in.0"] = x.contiguous()
        cases.append({"id": cid, "op": "view_chain", "args": {},
                      "inputs": [{"name": "0", "shape": shape, "dtype": name,
                                  "view": {"kind": "chain", "steps": steps}}]})
        want[cid] = (y.contiguous(), (y * y).contiguous(), steps)
    return cases, inputs, want


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        nan = torch.isnan(a) & torch.isnan(b)
        eq = (a == b) & (torch.signbit(a) == torch.signbit(b))
        return bool((nan | eq).all())
    return bool((a == b).all())


@pytest.mark.parametrize("search", [True, False], ids=["compiled", "as-built"])
def test_random_view_chains(tmp_path, search):
    if not RUNNER.is_file():
        pytest.fail(f"{RUNNER} not found: build it (cmake --build --preset release) or set LUMINAL_BIN_DIR")
    cases, inputs, want = make_cases()
    save_file(inputs, str(tmp_path / "in.safetensors"))
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    p = subprocess.run([str(RUNNER), *(["--search"] if search else []), str(tmp_path / "cases.json"),
                        str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, f"seed {SEED}: runner failed:\n{p.stderr[-3000:]}"
    errors, shapes = {}, {}
    for line in p.stdout.splitlines():
        msg = json.loads(line)
        if "error" in msg:
            errors[msg["id"]] = msg["error"]
        elif "shapes" in msg:
            shapes[msg["id"]] = msg["shapes"]
    outs = load_file(str(tmp_path / "out.safetensors"))
    bad = []
    for cid, (y, yy, steps) in want.items():
        if cid in errors:
            bad.append(f"{cid}: raised {errors[cid]!r}; steps {steps}")
            continue
        got = outs[f"{cid}.0"].reshape(shapes[cid][0])
        got2 = outs[f"{cid}.1"].reshape(shapes[cid][1])
        if not same(got, y):
            bad.append(f"{cid}: view differs; steps {steps}\n  want {y.flatten()[:12].tolist()}\n"
                       f"  got  {got.flatten()[:12].tolist()}")
        elif not same(got2, yy):
            bad.append(f"{cid}: y * y differs; steps {steps}")
    assert not bad, f"seed {SEED} (LUMINAL_VIEW_SEED={SEED} reproduces): {len(bad)} of {len(want)} chains wrong:\n" + \
        "\n".join(bad[:10])
