"""Op parity: every GraphTensor op against PyTorch, on the ReferenceRuntime.

All cases are generated up front with a fixed seed, their inputs saved to one
safetensors file, and run through ONE `luminal_op_runner` process (see op_runner.cpp).
Each op then gets its own pytest test that asserts on every case of that op.

Reference: PyTorch on CPU. For float results, torch is evaluated in float64 on the
exact (already rounded) input values and the result rounded once to the dtype torch
itself returns for the op (that dtype is taken from running the op natively). So a
F16/BF16 reference is the correctly rounded answer; luminal's error includes its own
intermediate roundings. Integer and Bool results are computed natively and compared
exactly. Tolerances are per result dtype (see TOL); reductions scale the absolute
tolerance by sqrt(reduced element count).

With LUMINAL_WRITE_OPS_MD=1 the run writes docs/ops.md, the op-parity table. By default
every case goes through the real compile (core rewrite rules and a small search, 8
candidates), so the parity covers what the search picks; LUMINAL_OPS_SEARCH=0 runs each
case's graph as built instead.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("LUMINAL_BIN_DIR", REPO_ROOT / "build" / "release"))
# LUMINAL_OPS_BACKENDS=cpu,cuda: every case also runs on these backends, compared with the
# reference runtime (test_op_backend, and a column per backend in docs/ops.md).
# LUMINAL_OPS_CPU=1 is LUMINAL_OPS_BACKENDS=cpu.
KNOWN_BACKENDS = ["cpu", "cuda"]  # docs/ops.md has a column for each, "not run" when absent
BACKENDS = [b for b in os.environ.get("LUMINAL_OPS_BACKENDS", "").split(",") if b]
if os.environ.get("LUMINAL_OPS_CPU") == "1" and "cpu" not in BACKENDS:
    BACKENDS.append("cpu")
RUNNER = BIN_DIR / "luminal_op_runner"

TD = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
    "I32": torch.int32, "I64": torch.int64, "I8": torch.int8, "U8": torch.uint8, "Bool": torch.bool,
}
NAME = {v: k for k, v in TD.items()}
FLOATS = ["F32", "F16", "BF16", "F64"]
INTS = ["I32", "I64", "I8", "U8"]
ALL = FLOATS + INTS + ["Bool"]
# (rtol, atol) per result dtype; ints and Bool are exact.
TOL = {"F64": (1e-9, 1e-9), "F32": (1e-5, 1e-5), "F16": (1e-2, 1e-2), "BF16": (2e-2, 2e-2)}
SPECIAL = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1.0, 1e-3, 0.5, -2.5, 100.0]

GEN = torch.Generator().manual_seed(20261130)


# ----------------------------------------------------------------------------------------
# Case construction
# ----------------------------------------------------------------------------------------
class Inp:
    """One input: the stored tensor `t`, an optional view applied in the graph, and
    symbolic axes {axis: dim name} of the stored tensor."""

    def __init__(self, t, view=None, sym=None):
        self.t = t.contiguous().clone()  # own storage: safetensors refuses shared tensors
        self.view = view
        self.sym = sym or {}


class Case:
    def __init__(self, op, tag, inputs, ref, args=None, runner_op=None, tol_scale=1.0, upcast=True):
        self.op = op
        self.tag = tag
        self.id = f"{op}.{tag}"
        self.inputs = inputs
        self.ref = ref
        self.args = args or {}
        self.runner_op = runner_op or op
        self.tol_scale = tol_scale
        self.upcast = upcast
        self.dims = {}
        for inp in inputs:
            for ax, name in inp.sym.items():
                self.dims[name] = int(inp.t.shape[ax])
        self.result = None  # filled by the session fixture
        self.result_raw = None  # the reference runtime's outputs
        self.backend_raw = {}  # backend -> (outputs, error), with LUMINAL_OPS_BACKENDS
        self.backend_result = {}  # backend -> evaluate_backend(...)

    @property
    def dtype(self):  # the dtype(s) a case is about: the first part of its tag
        return self.tag.split(".")[0]

    def features(self):
        f = set()
        if any(i.view for i in self.inputs):
            f.add("view")
        if self.dims:
            f.add("dynamic")
        shapes = [tuple(apply_view(i.t, i.view).shape) for i in self.inputs]
        if len(shapes) > 1 and len(set(shapes)) > 1:
            f.add("broadcast/mixed shapes")
        if "scalar" in self.args:
            f.add("scalar")
        if "special" in self.tag:
            f.add("inf/nan")
        return f

    def to_json(self):
        ins = []
        for k, inp in enumerate(self.inputs):
            shape = [inp.sym.get(ax, int(n)) for ax, n in enumerate(inp.t.shape)]
            ins.append({"name": str(k), "shape": shape, "dtype": NAME[inp.t.dtype], "view": inp.view})
        return {"id": self.id, "op": self.runner_op, "inputs": ins, "args": json_safe(self.args), "dims": self.dims}


def json_safe(v):
    """JSON has no inf/NaN: send them as strings (the runner parses "inf", "-inf", "nan")."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    return v


CASES: list[Case] = []
_ids: dict[str, int] = {}


def case(op, tag, inputs, ref, **kw):
    inputs = [i if isinstance(i, Inp) else Inp(i) for i in inputs]
    c = Case(op, tag, inputs, ref, **kw)
    if c.id in _ids:  # keep ids unique
        _ids[c.id] += 1
        c.id = f"{c.id}~{_ids[c.id]}"
    else:
        _ids[c.id] = 0
    CASES.append(c)
    return c


def rnd(shape, dt, kind="normal", lo=None, hi=None):
    """Random stored tensor of dtype `dt` (a luminal dtype name)."""
    shape = tuple(shape)
    if dt == "Bool":
        return torch.rand(shape, generator=GEN) < 0.5
    if dt in INTS and kind == "distinct":
        n = math.prod(shape)
        return (torch.randperm(n, generator=GEN) - (0 if dt == "U8" else n // 2)).reshape(shape).to(TD[dt])
    if dt in INTS:
        lo = (0 if dt == "U8" else -10) if lo is None else lo
        hi = 20 if hi is None else hi
        return torch.randint(lo, hi, shape, generator=GEN).to(TD[dt])
    if kind == "normal":
        x = torch.randn(shape, generator=GEN, dtype=torch.float64)
    elif kind == "pos":  # (0.05, 4)
        x = torch.rand(shape, generator=GEN, dtype=torch.float64) * 3.95 + 0.05
    elif kind == "uniform":
        x = torch.rand(shape, generator=GEN, dtype=torch.float64) * (hi - lo) + lo
    elif kind == "distinct":  # a permutation of distinct values, exactly representable
        n = math.prod(shape)
        x = (torch.randperm(n, generator=GEN).to(torch.float64) - n // 2).reshape(shape) * 0.5
    elif kind == "unit":  # (-1, 1): the domain of asin, acos, atanh
        x = torch.rand(shape, generator=GEN, dtype=torch.float64) * 1.98 - 0.99
    elif kind == "ge1":  # [1, 5): the domain of acosh
        x = torch.rand(shape, generator=GEN, dtype=torch.float64) * 4 + 1
    elif kind == "uniform_pm":  # [-1.5, -0.5] U [0.5, 1.5]: products neither blow up nor vanish
        x = (torch.rand(shape, generator=GEN, dtype=torch.float64) + 0.5) * torch.where(
            torch.rand(shape, generator=GEN) < 0.5, -1.0, 1.0).double()
    elif kind == "small_int":  # floats holding small integers: exercises ties/equalities
        x = torch.randint(-3, 4, shape, generator=GEN).to(torch.float64)
    else:
        raise ValueError(kind)
    return x.to(TD[dt])


def special(dt):
    return torch.tensor(SPECIAL, dtype=torch.float64).to(TD[dt])


def apply_view(t, v):
    if v is None:
        return t
    k = v["kind"]
    if k == "transpose":
        return t.transpose(*v["dims"])
    if k == "permute":
        return t.permute(*v["dims"])
    if k == "slice":
        idx = [slice(None)] * t.dim()
        idx[v["axis"]] = slice(v.get("start", 0), v.get("end"), v.get("step", 1))
        return t[tuple(idx)]
    if k == "expand":
        return t.expand(*v["shape"])
    if k == "flip":
        return t.flip(v["dims"])
    raise ValueError(k)


T01 = {"kind": "transpose", "dims": [0, 1]}


def sl(axis, start, end, step):
    return {"kind": "slice", "axis": axis, "start": start, "end": end, "step": step}


# ----------------------------------------------------------------------------------------
# Case generators, by category
# ----------------------------------------------------------------------------------------
def gen_unary(op, ref, kind="normal", dtypes=FLOATS, int_dtypes=("I32", "I64"), specials=True, wide=True, **kw):
    for dt in dtypes:
        case(op, f"{dt}.2d", [rnd((3, 5), dt, kind)], ref, **kw)
    case(op, "F32.3d", [rnd((2, 3, 4), "F32", kind)], ref, **kw)
    case(op, "F32.1d", [rnd((7,), "F32", kind)], ref, **kw)
    case(op, "F32.transposed", [Inp(rnd((5, 3), "F32", kind), T01)], ref, **kw)
    case(op, "F32.sliced_step2", [Inp(rnd((4, 10), "F32", kind), sl(1, 1, 9, 2))], ref, **kw)
    case(op, "F32.expanded", [Inp(rnd((1, 4), "F32", kind), {"kind": "expand", "shape": [3, 4]})], ref, **kw)
    case(op, "F16.dynamic", [Inp(rnd((2, 6), "F16", kind), sym={1: "seq"})], ref, **kw)
    case(op, "F32.dynamic", [Inp(rnd((6, 3), "F32", kind), sym={0: "seq"})], ref, **kw)
    for dt in int_dtypes:
        case(op, f"{dt}.2d", [rnd((3, 4), dt, lo=0 if dt == "U8" else -5 if kind != "pos" else 1, hi=6)], ref, **kw)
    if specials:
        for dt in ("F32", "F64"):
            case(op, f"{dt}.special", [special(dt)], ref, **kw)
    if wide:  # large magnitudes: overflow and saturation paths in every float dtype
        for dt in FLOATS:
            t = rnd((24,), dt, "uniform", lo=1e-3, hi=1e4) if kind == "pos" else rnd((24,), dt, "uniform", lo=-40, hi=40)
            case(op, f"{dt}.wide", [t], ref, **kw)


def gen_binary(op, ref, dtypes=FLOATS + INTS, kind="normal", kind_b=None, int_lo=None, nonzero_b=False,
               scalars=(2.5,), reverse_scalars=(), specials=True, mixed=True, runner_op=None):
    kind_b = kind_b or kind

    def b(shape, dt):
        t = rnd(shape, dt, kind_b, lo=int_lo)
        if nonzero_b:
            if dt in INTS:
                t = torch.where(t == 0, torch.ones_like(t), t)
            else:
                t = torch.where(t.abs() < 0.1, torch.full_like(t, 0.5), t)
        return t

    kw = {"runner_op": runner_op}
    for dt in dtypes:
        case(op, f"{dt}.same", [rnd((3, 4), dt, kind, lo=int_lo), b((3, 4), dt)], ref, **kw)
    case(op, "F32.bcast_3d", [rnd((3, 1, 4), "F32", kind), b((2, 4), "F32")], ref, **kw)
    case(op, "F32.bcast_row", [rnd((4,), "F32", kind), b((3, 4), "F32")], ref, **kw)
    case(op, "F16.bcast_col", [rnd((3, 1), "F16", kind), b((3, 5), "F16")], ref, **kw)
    case(op, "F32.transposed", [Inp(rnd((4, 3), "F32", kind), T01), b((3, 4), "F32")], ref, **kw)
    case(op, "F32.sliced", [Inp(rnd((3, 9), "F32", kind), sl(1, 0, 8, 2)), b((3, 4), "F32")], ref, **kw)
    case(op, "F32.dynamic", [Inp(rnd((5, 4), "F32", kind), sym={0: "seq"}), b((4,), "F32")], ref, **kw)
    case(op, "BF16.dynamic", [Inp(rnd((5, 4), "BF16", kind), sym={0: "seq"}),
                              Inp(b((5, 4), "BF16"), sym={0: "seq"})], ref, **kw)
    if mixed:
        case(op, "F16xF32.mixed", [rnd((3, 4), "F16", kind), b((3, 4), "F32")], ref, **kw)
        case(op, "I32xF32.mixed", [rnd((3, 4), "I32", lo=int_lo), b((3, 4), "F32")], ref, **kw)
        if "I64" in dtypes:
            case(op, "I64xI32.mixed", [rnd((3, 4), "I64", lo=int_lo), b((3, 4), "I32")], ref, **kw)
    for s in scalars:
        for dt in ("F32", "F16", "I32"):
            if dt in dtypes:
                # luminal takes scalars as double: an integral value keeps an int tensor's dtype
                # (C++ cannot tell 3 from 3.0), so the torch reference gets a Python int there.
                ps = int(s) if dt in INTS and s == int(s) else s
                case(op, f"{dt}.scalar{s}", [rnd((3, 4), dt, kind, lo=int_lo)],
                     lambda xs, s=ps: ref([xs[0], s]), args={"scalar": s}, **kw)
    for s in reverse_scalars:
        for dt in ("F32", "BF16"):
            case(op, f"{dt}.rscalar{s}", [b((3, 4), dt)], lambda xs, s=s: ref([s, xs[0]]),
                 args={"scalar": s, "reverse": True}, **kw)
    if specials:
        for dt in ("F32", "F64"):
            sp = special(dt)
            case(op, f"{dt}.special", [sp, sp.flip(0)], ref, **kw)


def gen_reduce(op, ref, dtypes=FLOATS, int_dtypes=(), kind="normal", multi_axis=True, allow_empty_axes=True,
               special_ok=True, **kw):
    """ref(x, axes, keepdim) with axes a list (empty: all)."""

    def mk(tag, inp, axes, keepdim=False, n=1):
        case(op, tag, [inp], lambda xs, axes=axes, keepdim=keepdim: ref(xs[0], axes, keepdim),
             args={"axes": axes, "keepdim": keepdim}, tol_scale=math.sqrt(n), **kw)

    for dt in dtypes:
        mk(f"{dt}.axis1", rnd((4, 6), dt, kind), [1], n=6)
    for dt in int_dtypes:
        mk(f"{dt}.axis1", rnd((4, 6), dt, kind, lo=-3 if dt != "U8" else 0, hi=4), [1], n=6)
    mk("F32.axis0", rnd((4, 6), "F32", kind), [0], n=4)
    mk("F32.axis-1_keepdim", rnd((2, 3, 5), "F32", kind), [-1], True, n=5)
    if multi_axis:
        mk("F32.axes02", rnd((2, 3, 5), "F32", kind), [0, 2], n=10)
        mk("F16.axes02_keepdim", rnd((2, 3, 5), "F16", kind), [0, 2], True, n=10)
    if allow_empty_axes:
        mk("F32.all", rnd((3, 4), "F32", kind), [], n=12)
    mk("F32.transposed", Inp(rnd((6, 4), "F32", kind), T01), [1], n=6)
    mk("F32.sliced", Inp(rnd((4, 12), "F32", kind), sl(1, 1, 12, 3)), [1], n=4)
    mk("F32.dynamic_reduced", Inp(rnd((3, 7), "F32", kind), sym={1: "seq"}), [1], n=7)
    mk("F32.dynamic_kept", Inp(rnd((7, 3), "F32", kind), sym={0: "seq"}), [1], n=3)
    mk("F32.long", rnd((2, 300), "F32", kind), [1], n=300)
    if special_ok:
        mk("F32.special", special("F32").reshape(2, 5), [1], n=5)


def gen_axis_op(op, ref, dtypes=FLOATS, kind="normal", extra_args=None, tol_scale=1.0, int_dtypes=(), axis_key="axis"):
    """Ops taking one axis: ref(x, axis)."""
    extra_args = extra_args or {}

    def mk(tag, inp, axis):
        case(op, tag, [inp], lambda xs, axis=axis: ref(xs[0], axis), args={axis_key: axis, **extra_args},
             tol_scale=tol_scale)

    for dt in dtypes:
        mk(f"{dt}.axis-1", rnd((4, 6), dt, kind), -1)
    for dt in int_dtypes:
        mk(f"{dt}.axis-1", rnd((4, 6), dt, kind), -1)
    mk("F32.axis0", rnd((5, 3), "F32", kind), 0)
    mk("F32.3d_axis1", rnd((2, 5, 3), "F32", kind), 1)
    mk("F32.transposed", Inp(rnd((6, 4), "F32", kind), T01), 1)
    mk("F32.dynamic", Inp(rnd((3, 7), "F32", kind), sym={1: "seq"}), 1)
    mk("F32.dynamic_other", Inp(rnd((7, 3), "F32", kind), sym={0: "seq"}), 1)


def gen_all():
    CASES.clear()
    _ids.clear()

    # ---- arithmetic ----
    gen_binary("add", lambda v: v[0] + v[1], reverse_scalars=(1.5,))
    gen_binary("sub", lambda v: v[0] - v[1], reverse_scalars=(1.5,))
    gen_binary("mul", lambda v: v[0] * v[1], reverse_scalars=(-2.0,))
    gen_binary("div", lambda v: v[0] / v[1], nonzero_b=True, scalars=(4.0, 3.0), reverse_scalars=(1.5,))
    gen_binary("mod", lambda v: torch.remainder(v[0], v[1]), dtypes=FLOATS + ["I32", "I64", "I8"], nonzero_b=True,
               scalars=(3.0, -2.5), specials=False)
    gen_binary("floor_div", lambda v: torch.floor_divide(v[0], v[1]), dtypes=FLOATS + ["I32", "I64", "I8"],
               nonzero_b=True, scalars=(), specials=False)
    case("mod", "I32.neg_divisor", [torch.tensor([7, -7, 7, -7, 0, 6], dtype=torch.int32),
                                    torch.tensor([3, 3, -3, -3, 5, -4], dtype=torch.int32)],
         lambda v: torch.remainder(v[0], v[1]))
    case("floor_div", "I64.neg", [torch.tensor([7, -7, 7, -7, 0, 6], dtype=torch.int64),
                                  torch.tensor([3, 3, -3, -3, 5, -4], dtype=torch.int64)],
         lambda v: torch.floor_divide(v[0], v[1]))
    zden = torch.tensor([0.0, -0.0, 0.0, 0.0])
    case("div", "F32.by_zero", [torch.tensor([1.0, 1.0, -2.0, 0.0]), zden], lambda v: v[0] / v[1])
    case("div", "I32.by_zero", [torch.tensor([1, -1, 0], dtype=torch.int32), torch.zeros(3, dtype=torch.int32)],
         lambda v: v[0] / v[1])
    case("mod", "F32.by_zero", [torch.tensor([1.0, 1.0, -2.0, 0.0]), zden], lambda v: torch.remainder(v[0], v[1]))
    case("mod", "F32.special_dividend", [special("F32"), torch.full((10,), 1.5)], lambda v: torch.remainder(v[0], v[1]))
    case("mod", "F32.inf_divisor", [torch.tensor([1.5, -1.5, 0.0, -0.0]), torch.tensor([float("inf")] * 2 + [float("-inf")] * 2)],
         lambda v: torch.remainder(v[0], v[1]))
    case("floor_div", "F32.by_zero", [torch.tensor([1.0, 1.0, -2.0, 0.0]), zden], lambda v: torch.floor_divide(v[0], v[1]))
    big = torch.tensor([2**60 + 7, -(2**60) - 3, 2**53 + 1, 123456789012345678, -5], dtype=torch.int64)
    case("floor_div", "I64.large", [big, torch.tensor([3, 7, 2, 1000003, 2], dtype=torch.int64)],
         lambda v: torch.floor_divide(v[0], v[1]))
    case("mod", "I64.large", [big, torch.tensor([3, 7, 2, 1000003, 2], dtype=torch.int64)],
         lambda v: torch.remainder(v[0], v[1]))
    case("abs", "I64.large", [big], lambda v: v[0].abs())
    case("sign", "I64.large", [big], lambda v: v[0].sign())
    case("mul", "I64.wrap", [big, torch.tensor([16, 3, 5, 77, -9], dtype=torch.int64)], lambda v: v[0] * v[1])
    case("max", "I64.large", [big.reshape(1, 5)], lambda v: torch.amax(v[0], dim=[1]), args={"axes": [1]})
    case("min", "I64.large", [big.reshape(1, 5)], lambda v: torch.amin(v[0], dim=[1]), args={"axes": [1]})
    case("cumsum", "I64.large", [big.reshape(1, 5)], lambda v: torch.cumsum(v[0], dim=1), args={"axis": 1})
    case("sort", "I64.large", [big.reshape(1, 5)], lambda v: tuple(torch.sort(v[0], dim=-1, stable=True)))
    case("clamp", "I64.large", [big], lambda v: torch.clamp(v[0], -(2**55), 2**55), args={"min": -(2**55), "max": 2**55})
    case("pow", "I64.large_base", [torch.tensor([3, -3, 1000003, 7], dtype=torch.int64),
                                   torch.tensor([39, 37, 3, 20], dtype=torch.int64)], lambda v: torch.pow(v[0], v[1]))
    case("eq", "I64.large", [big, big + torch.tensor([0, 1, 1, 0, 0])], lambda v: torch.eq(v[0], v[1]))
    case("cast", "I64->F32.large", [big], lambda v: v[0].to(torch.float32), args={"dtype": "F32"}, upcast=False)
    case("floor_div", "F32.special", [special("F32"), torch.full((10,), 2.0)], lambda v: torch.floor_divide(v[0], v[1]))
    gen_unary("neg", lambda v: -v[0], int_dtypes=("I32", "I64", "I8"))
    gen_unary("abs", lambda v: v[0].abs(), int_dtypes=("I32", "I64", "I8", "U8"))
    gen_unary("sign", lambda v: v[0].sign(), int_dtypes=("I32", "I64", "I8", "U8"))
    case("sign", "Bool.1d", [rnd((6,), "Bool")], lambda v: v[0].sign())
    for op, fn in (("add", torch.add), ("mul", torch.mul)):
        case(op, "Bool.same", [rnd((3, 4), "Bool"), rnd((3, 4), "Bool")], lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "BoolxI32.mixed", [rnd((3, 4), "Bool"), rnd((3, 4), "I32")], lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "BoolxF16.mixed", [rnd((3, 4), "Bool"), rnd((3, 4), "F16")], lambda v, fn=fn: fn(v[0], v[1]))
    # torch gives int16 here; luminal has no I16 and promotes to I32 (docs/ops.md).
    case("add", "U8xI8.mixed", [rnd((3, 4), "U8"), rnd((3, 4), "I8")], lambda v: (v[0] + v[1]).to(torch.int32))
    case("add", "I8.overflow", [torch.tensor([100, -100, 127], dtype=torch.int8), torch.tensor([100, -100, 1], dtype=torch.int8)],
         lambda v: v[0] + v[1])
    case("add", "F16.overflow", [torch.tensor([60000.0, -60000.0, 1.0], dtype=torch.float16),
                                 torch.tensor([60000.0, -60000.0, 2.0**-24], dtype=torch.float16)], lambda v: v[0] + v[1])
    case("contiguous", "F32.transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v: v[0].contiguous())
    case("contiguous", "BF16.sliced", [Inp(rnd((4, 9), "BF16"), sl(1, 1, 9, 3))], lambda v: v[0].contiguous())
    case("contiguous", "I64.dynamic_expanded", [Inp(rnd((1, 3), "I64"), {"kind": "expand", "shape": [4, 3]})],
         lambda v: v[0].contiguous())

    # pow: positive base with any exponent, negative base with integral exponents, scalars.
    for dt in FLOATS:
        case("pow", f"{dt}.pos_base", [rnd((3, 4), dt, "pos"), rnd((3, 4), dt, "uniform", lo=-2, hi=3)],
             lambda v: torch.pow(v[0], v[1]))
        case("pow", f"{dt}.neg_base_int_exp", [rnd((3, 4), dt), rnd((3, 4), dt, "small_int")],
             lambda v: torch.pow(v[0], v[1]))
    case("pow", "F32.neg_base_frac_exp", [-rnd((5,), "F32", "pos"), torch.full((5,), 0.5)],
         lambda v: torch.pow(v[0], v[1]))
    case("pow", "F32.bcast", [rnd((3, 1), "F32", "pos"), rnd((4,), "F32")], lambda v: torch.pow(v[0], v[1]))
    case("pow", "F32.dynamic", [Inp(rnd((5, 2), "F32", "pos"), sym={0: "seq"}), rnd((2,), "F32")],
         lambda v: torch.pow(v[0], v[1]))
    case("pow", "F32.transposed", [Inp(rnd((4, 3), "F32", "pos"), T01), rnd((3, 4), "F32")],
         lambda v: torch.pow(v[0], v[1]))
    for s in (2.0, 3.0, 0.5, -1.0, 2.5, -2.0, 0.0):
        for dt in ("F32", "F16", "F64"):
            case("pow", f"{dt}.scalar{s}", [rnd((3, 4), dt, "pos" if s in (0.5, 2.5) else "normal")],
                 lambda v, s=s: torch.pow(v[0], s), args={"scalar": s})
    case("pow", "I64.int_base_int_exp", [rnd((3, 4), "I64", lo=-4, hi=5), rnd((3, 4), "I64", lo=0, hi=4)],
         lambda v: torch.pow(v[0], v[1]))
    case("pow", "I32.scalar2.0", [rnd((3, 4), "I32", lo=-4, hi=5)], lambda v: torch.pow(v[0], 2), args={"scalar": 2.0})
    case("pow", "F32.special", [special("F32"), torch.full((10,), 2.0)], lambda v: torch.pow(v[0], v[1]))
    case("pow", "F32.special_exp", [torch.full((10,), 2.0), special("F32")], lambda v: torch.pow(v[0], v[1]))
    # Every special base with every special exponent: C's pow special cases, which torch
    # follows for a tensor exponent ((-inf) ** 2.5 = +inf, (-0) ** -3 = -inf, (-1) ** inf = 1).
    for dt in ("F32", "F64"):
        sp = special(dt)
        case("pow", f"{dt}.special_x_special", [sp.repeat_interleave(len(SPECIAL)), sp.repeat(len(SPECIAL))],
             lambda v: torch.pow(v[0], v[1]))
    # Scalar exponents: torch's scalar kernel uses sqrt / rsqrt for 0.5 / -0.5.
    for s in (2.5, -2.5, 3.0, -3.0, 0.5, -0.5):
        case("pow", f"F32.special_scalar{s}", [special("F32")], lambda v, s=s: torch.pow(v[0], s), args={"scalar": s})
    case("pow", "F32.zero_base", [torch.zeros(4), torch.tensor([0.0, 1.0, 2.5, -1.0])],
         lambda v: torch.pow(v[0], v[1]))

    for op, fn in (("minimum", torch.minimum), ("maximum", torch.maximum)):
        gen_binary(op, lambda v, fn=fn: fn(v[0], v[1]) if isinstance(v[1], torch.Tensor)
                   else fn(v[0], torch.tensor(v[1])), scalars=(0.5,), mixed=True)
    for dt in FLOATS + ["I32", "I64"]:
        case("clamp", f"{dt}.both", [rnd((3, 5), dt)], lambda v: torch.clamp(v[0], -0.5 if v[0].is_floating_point() else -2, 1.0 if v[0].is_floating_point() else 3),
             args={"min": -0.5 if dt in FLOATS else -2, "max": 1.0 if dt in FLOATS else 3})
    case("clamp", "F32.min_only", [rnd((3, 5), "F32")], lambda v: torch.clamp(v[0], min=0.0), args={"min": 0.0})
    case("clamp", "F32.max_only", [rnd((3, 5), "F32")], lambda v: torch.clamp(v[0], max=0.25), args={"max": 0.25})
    case("clamp", "F32.transposed", [Inp(rnd((5, 3), "F32"), T01)], lambda v: torch.clamp(v[0], -0.5, 0.5),
         args={"min": -0.5, "max": 0.5})
    case("clamp", "F32.dynamic", [Inp(rnd((5, 3), "F32"), sym={0: "seq"})], lambda v: torch.clamp(v[0], -0.5, 0.5),
         args={"min": -0.5, "max": 0.5})
    case("clamp", "F32.min_above_max", [rnd((3, 5), "F32")], lambda v: torch.clamp(v[0], 1.0, -1.0),
         args={"min": 1.0, "max": -1.0})
    case("clamp", "I32.float_bounds", [rnd((3, 5), "I32")], lambda v: torch.clamp(v[0], -2.5, 3.5),
         args={"min": -2.5, "max": 3.5})
    case("clamp", "F32.special", [special("F32")], lambda v: torch.clamp(v[0], -1.0, 1.0), args={"min": -1.0, "max": 1.0})

    # ---- elementwise functions ----
    gen_unary("exp", lambda v: v[0].exp())
    gen_unary("exp2", lambda v: torch.exp2(v[0]))
    gen_unary("log", lambda v: v[0].log(), kind="pos")
    gen_unary("log2", lambda v: v[0].log2(), kind="pos")
    gen_unary("sin", lambda v: v[0].sin())
    gen_unary("cos", lambda v: v[0].cos())
    gen_unary("tan", lambda v: v[0].tan())
    case("sin", "F32.large_args", [torch.tensor([10.0, 100.0, -50.0, 1000.0, 3.14159265])], lambda v: v[0].sin())
    case("cos", "F32.large_args", [torch.tensor([10.0, 100.0, -50.0, 1000.0, 3.14159265])], lambda v: v[0].cos())
    gen_unary("sqrt", lambda v: v[0].sqrt(), kind="pos")
    gen_unary("rsqrt", lambda v: v[0].rsqrt(), kind="pos")
    gen_unary("reciprocal", lambda v: v[0].reciprocal(), kind="pos")
    for op in ("floor", "ceil", "round"):
        gen_unary(op, lambda v, op=op: getattr(v[0], op)(), int_dtypes=("I32", "I64"))
        case(op, "F32.halves", [torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.49, 1e7 + 0.5, -0.0])],
             lambda v, op=op: getattr(v[0], op)())
        case(op, "F64.large", [torch.tensor([1e15 + 0.5, -1e15 - 0.5, 4503599627370497.0, 2.0**60], dtype=torch.float64)],
             lambda v, op=op: getattr(v[0], op)())
    for dt in ("F16", "BF16"):
        case("round", f"{dt}.halves", [torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 254.5], dtype=TD[dt])],
             lambda v: v[0].round())
    gen_unary("erf", lambda v: torch.erf(v[0]))
    gen_unary("tanh", lambda v: v[0].tanh())
    gen_unary("sigmoid", lambda v: v[0].sigmoid())
    gen_unary("relu", lambda v: F.relu(v[0]), int_dtypes=("I32", "I64"))
    gen_unary("leaky_relu", lambda v: F.leaky_relu(v[0], 0.01), int_dtypes=())
    case("leaky_relu", "F32.slope0.2", [rnd((3, 5), "F32")], lambda v: F.leaky_relu(v[0], 0.2), args={"slope": 0.2})
    gen_unary("gelu", lambda v: F.gelu(v[0]), int_dtypes=())
    gen_unary("gelu_tanh", lambda v: F.gelu(v[0], approximate="tanh"), int_dtypes=())
    gen_unary("silu", lambda v: F.silu(v[0]), int_dtypes=())
    gen_unary("softplus", lambda v: F.softplus(v[0]), int_dtypes=())
    case("softplus", "F32.beta2_thr5", [rnd((4, 5), "F32") * 4], lambda v: F.softplus(v[0], beta=2, threshold=5),
         args={"beta": 2.0, "threshold": 5.0})

    # ---- comparisons and logic ----
    cmp_fns = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}
    for op, fn in cmp_fns.items():
        gen_binary(op, lambda v, fn=fn: fn(v[0], v[1]), kind="small_int", scalars=(1.0, 0.5))
    for op, fn in (("logical_and", torch.logical_and), ("logical_or", torch.logical_or)):
        gen_binary(op, lambda v, fn=fn: fn(v[0], v[1]), dtypes=["Bool"] + FLOATS + ["I32"], kind="small_int",
                   scalars=(), mixed=True)
        case(op, "Bool.bcast", [rnd((3, 1), "Bool"), rnd((4,), "Bool")], lambda v, fn=fn: fn(v[0], v[1]))
    for dt in ["Bool"] + FLOATS + ["I32", "U8"]:
        case("logical_not", f"{dt}.2d", [rnd((3, 4), dt, "small_int")], lambda v: torch.logical_not(v[0]))
    case("logical_not", "Bool.transposed", [Inp(rnd((4, 3), "Bool"), T01)], lambda v: torch.logical_not(v[0]))
    case("logical_not", "F32.special", [special("F32")], lambda v: torch.logical_not(v[0]))
    for dt in ALL:
        case("where", f"{dt}.same", [rnd((3, 4), "Bool"), rnd((3, 4), dt), rnd((3, 4), dt)],
             lambda v: torch.where(v[0], v[1], v[2]))
    case("where", "F32.bcast", [rnd((3, 1), "Bool"), rnd((4,), "F32"), rnd((2, 1, 1), "F32")],
         lambda v: torch.where(v[0], v[1], v[2]))
    case("where", "F16xF32.mixed", [rnd((3, 4), "Bool"), rnd((3, 4), "F16"), rnd((3, 4), "F32")],
         lambda v: torch.where(v[0], v[1], v[2]))
    case("where", "I64xF32.mixed", [rnd((3, 4), "Bool"), rnd((3, 4), "I64"), rnd((3, 4), "F32")],
         lambda v: torch.where(v[0], v[1], v[2]))
    case("where", "F32.transposed", [Inp(rnd((4, 3), "Bool"), T01), rnd((3, 4), "F32"), Inp(rnd((4, 3), "F32"), T01)],
         lambda v: torch.where(v[0], v[1], v[2]))
    case("where", "F32.dynamic", [Inp(rnd((5, 3), "Bool"), sym={0: "seq"}), Inp(rnd((5, 3), "F32"), sym={0: "seq"}),
                                  rnd((3,), "F32")], lambda v: torch.where(v[0], v[1], v[2]))
    sp = special("F32")
    case("where", "F32.special", [rnd((10,), "Bool"), sp, sp.flip(0)], lambda v: torch.where(v[0], v[1], v[2]))

    # ---- reductions ----
    def red_all(fn):
        return lambda x, axes, keepdim: fn(x, axes if axes else list(range(x.dim())), keepdim)

    gen_reduce("sum", red_all(lambda x, a, k: torch.sum(x, dim=a, keepdim=k)), int_dtypes=INTS)
    case("sum", "F32.empty_axis", [torch.zeros((3, 0))], lambda v: torch.sum(v[0], dim=[1]), args={"axes": [1]})
    case("mean", "F32.empty_axis", [torch.zeros((3, 0))], lambda v: torch.mean(v[0], dim=[1]), args={"axes": [1]})
    case("prod", "F32.empty_axis", [torch.zeros((3, 0))], lambda v: torch.prod(v[0], dim=1), args={"axes": [1]})
    case("softmax", "F32.size1_axis", [rnd((3, 1), "F32")], lambda v: torch.softmax(v[0], dim=1), args={"axis": 1})
    case("cumsum", "F32.size1_axis", [rnd((3, 1), "F32")], lambda v: torch.cumsum(v[0], dim=1), args={"axis": 1})
    case("sum", "Bool.axis1", [rnd((4, 6), "Bool")], lambda v: torch.sum(v[0], dim=[1]), args={"axes": [1]})
    gen_reduce("mean", red_all(lambda x, a, k: torch.mean(x, dim=a, keepdim=k)))
    gen_reduce("max", red_all(lambda x, a, k: torch.amax(x, dim=a, keepdim=k)), int_dtypes=INTS)
    gen_reduce("min", red_all(lambda x, a, k: torch.amin(x, dim=a, keepdim=k)), int_dtypes=INTS)
    case("max", "Bool.axis1", [rnd((4, 6), "Bool")], lambda v: torch.amax(v[0], dim=[1]), args={"axes": [1]})
    case("min", "Bool.axis1", [rnd((4, 6), "Bool")], lambda v: torch.amin(v[0], dim=[1]), args={"axes": [1]})

    def prod_ref(x, axes, keepdim):
        axes = sorted((a % x.dim()) for a in (axes or range(x.dim())))
        for a in reversed(axes):
            x = torch.prod(x, dim=a, keepdim=keepdim)
        return x

    for dt in FLOATS:
        case("prod", f"{dt}.axis1", [rnd((4, 5), dt, "uniform", lo=-1.5, hi=1.5)],
             lambda v: prod_ref(v[0], [1], False), args={"axes": [1]}, tol_scale=math.sqrt(5))
    for dt in ("I32", "I64"):
        case("prod", f"{dt}.axis1", [rnd((4, 5), dt, lo=-3, hi=4)], lambda v: prod_ref(v[0], [1], False),
             args={"axes": [1]})
    case("prod", "I64.large", [torch.tensor([[1000003, 1000033, 999983], [-7, 11, 13]], dtype=torch.int64)],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]})
    case("prod", "I32.exact", [torch.tensor([[97, 89, 83, 79], [-3, 5, -7, 11]], dtype=torch.int32)],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]})
    case("prod", "I64.dynamic", [Inp(torch.tensor([[3, -5, 7, 11], [2, 2, 2, 2]], dtype=torch.int64), sym={1: "seq"})],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]})
    case("prod", "I32.empty_axis_keepdim", [torch.zeros((2, 0), dtype=torch.int32)],
         lambda v: torch.prod(v[0], dim=1, keepdim=True), args={"axes": [1], "keepdim": True})
    case("prod", "I32.all", [rnd((2, 3), "I32", lo=-3, hi=4)], lambda v: prod_ref(v[0], [], False), args={"axes": []})
    case("prod", "F32.with_zero", [torch.tensor([[1.5, 0.0, -2.0], [-1.0, -3.0, 0.5]])],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]})
    case("prod", "F32.all", [rnd((3, 4), "F32", "uniform", lo=0.5, hi=1.5)], lambda v: prod_ref(v[0], [], False),
         args={"axes": []}, tol_scale=math.sqrt(12))
    case("prod", "F32.axes02_keepdim", [rnd((2, 3, 2), "F32", "uniform", lo=-1.5, hi=1.5)],
         lambda v: prod_ref(v[0], [0, 2], True), args={"axes": [0, 2], "keepdim": True}, tol_scale=2)
    case("prod", "F32.transposed", [Inp(rnd((5, 3), "F32", "uniform", lo=-1.5, hi=1.5), T01)],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]}, tol_scale=math.sqrt(5))
    case("prod", "F32.dynamic", [Inp(rnd((3, 6), "F32", "uniform", lo=-1.5, hi=1.5), sym={1: "seq"})],
         lambda v: prod_ref(v[0], [1], False), args={"axes": [1]}, tol_scale=math.sqrt(6))
    case("prod", "F32.special", [special("F32").reshape(2, 5)], lambda v: prod_ref(v[0], [1], False),
         args={"axes": [1]})

    for op, fn in (("var", torch.var), ("std", torch.std)):
        for dt in FLOATS:
            case(op, f"{dt}.axis1", [rnd((4, 6), dt)], lambda v, fn=fn: fn(v[0], dim=[1]), args={"axes": [1]},
                 tol_scale=math.sqrt(6))
        case(op, "F32.correction0", [rnd((4, 6), "F32")], lambda v, fn=fn: fn(v[0], dim=[1], correction=0),
             args={"axes": [1], "correction": 0}, tol_scale=math.sqrt(6))
        case(op, "F32.axes02_keepdim", [rnd((2, 3, 5), "F32")],
             lambda v, fn=fn: fn(v[0], dim=[0, 2], keepdim=True), args={"axes": [0, 2], "keepdim": True},
             tol_scale=math.sqrt(10))
        case(op, "F32.all", [rnd((3, 4), "F32")], lambda v, fn=fn: fn(v[0]), args={"axes": []}, tol_scale=math.sqrt(12))
        case(op, "F32.transposed", [Inp(rnd((6, 4), "F32"), T01)], lambda v, fn=fn: fn(v[0], dim=[1]),
             args={"axes": [1]}, tol_scale=math.sqrt(6))
        case(op, "F32.dynamic", [Inp(rnd((3, 7), "F32"), sym={1: "seq"})], lambda v, fn=fn: fn(v[0], dim=[1]),
             args={"axes": [1]}, tol_scale=math.sqrt(7))
        case(op, "F32.single_elem_corr1", [rnd((3, 1), "F32")], lambda v, fn=fn: fn(v[0], dim=[1]),
             args={"axes": [1]})
        case(op, "I32.axis1", [rnd((3, 5), "I32")], lambda v, fn=fn: fn(v[0].float(), dim=[1]), args={"axes": [1]})

    gen_reduce("logsumexp", red_all(lambda x, a, k: torch.logsumexp(x, dim=a, keepdim=k)), special_ok=False)
    case("logsumexp", "F32.neg_inf_row", [torch.tensor([[float("-inf")] * 3, [1.0, float("-inf"), 2.0]])],
         lambda v: torch.logsumexp(v[0], dim=[1]), args={"axes": [1]})
    case("logsumexp", "F32.large", [torch.tensor([[1000.0, 1000.0], [-1000.0, -1001.0]])],
         lambda v: torch.logsumexp(v[0], dim=[1]), args={"axes": [1]})
    case("sum_all", "F32.3d", [rnd((2, 3, 4), "F32")], lambda v: v[0].sum(), tol_scale=math.sqrt(24))
    case("sum_all", "I32.2d", [rnd((3, 4), "I32")], lambda v: v[0].sum())
    case("sum_all", "F32.dynamic", [Inp(rnd((5, 3), "F32"), sym={0: "seq"})], lambda v: v[0].sum(), tol_scale=4)

    for op, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        gen_axis_op(op, lambda x, axis, fn=fn: fn(x, dim=axis), kind="distinct", int_dtypes=("I32", "I64"))
        case(op, "F32.keepdim", [rnd((4, 6), "F32", "distinct")], lambda v, fn=fn: fn(v[0], dim=1, keepdim=True),
             args={"axis": 1, "keepdim": True})
        case(op, "F32.ties_first", [torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, -1.0]])],
             lambda v, fn=fn: fn(v[0], dim=1), args={"axis": 1})
    gen_axis_op("cumsum", lambda x, axis: torch.cumsum(x, dim=axis), int_dtypes=("I32", "I64"), tol_scale=2.5)
    case("cumsum", "F32.long", [rnd((2, 200), "F32")], lambda v: torch.cumsum(v[0], dim=1), args={"axis": 1},
         tol_scale=15)
    for dt in ("U8", "I8"):
        case("cumsum", f"{dt}.axis-1", [rnd((3, 5), dt)], lambda v: torch.cumsum(v[0], dim=-1), args={"axis": -1})
    case("cumsum", "Bool.axis-1", [rnd((3, 5), "Bool")], lambda v: torch.cumsum(v[0], dim=-1), args={"axis": -1})
    gen_axis_op("softmax", lambda x, axis: torch.softmax(x, dim=axis))
    case("softmax", "F32.special", [special("F32").reshape(2, 5)], lambda v: torch.softmax(v[0], dim=1), args={"axis": 1})
    case("log_softmax", "F32.special", [special("F32").reshape(2, 5)], lambda v: torch.log_softmax(v[0], dim=1),
         args={"axis": 1})
    case("softmax", "BF16.wide", [rnd((3, 16), "BF16", "uniform", lo=-40, hi=40)], lambda v: torch.softmax(v[0], dim=1),
         args={"axis": 1})
    case("softmax", "F16.wide", [rnd((3, 16), "F16", "uniform", lo=-40, hi=40)], lambda v: torch.softmax(v[0], dim=1),
         args={"axis": 1})
    case("cumsum", "F32.special", [special("F32").reshape(2, 5)], lambda v: torch.cumsum(v[0], dim=1), args={"axis": 1})
    case("argmax", "F32.nan", [torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 2.0, float("nan")]])],
         lambda v: torch.argmax(v[0], dim=1), args={"axis": 1})
    case("argmin", "F32.nan", [torch.tensor([[1.0, float("nan"), -3.0], [float("-inf"), 2.0, float("nan")]])],
         lambda v: torch.argmin(v[0], dim=1), args={"axis": 1})
    case("max", "F32.nan", [torch.tensor([[1.0, float("nan"), 3.0], [float("-inf"), 2.0, 0.0]])],
         lambda v: torch.amax(v[0], dim=1), args={"axes": [1]})
    case("min", "F32.nan", [torch.tensor([[1.0, float("nan"), 3.0], [float("inf"), 2.0, 0.0]])],
         lambda v: torch.amin(v[0], dim=1), args={"axes": [1]})
    case("sum", "F16.overflow", [torch.full((2, 8), 20000.0, dtype=torch.float16)], lambda v: torch.sum(v[0], dim=[1]),
         args={"axes": [1]})
    case("mean", "F16.large_sum", [torch.full((2, 8), 20000.0, dtype=torch.float16)], lambda v: torch.mean(v[0], dim=[1]),
         args={"axes": [1]})
    case("softmax", "F32.large_logits", [torch.tensor([[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0]])],
         lambda v: torch.softmax(v[0], dim=1), args={"axis": 1})
    case("softmax", "F32.neg_inf_mask", [torch.tensor([[1.0, float("-inf"), 2.0], [float("-inf"), 0.0, float("-inf")]])],
         lambda v: torch.softmax(v[0], dim=1), args={"axis": 1})
    case("softmax", "I64.axis-1", [rnd((3, 4), "I64")], lambda v: torch.softmax(v[0].float(), dim=-1), args={"axis": -1})
    gen_axis_op("log_softmax", lambda x, axis: torch.log_softmax(x, dim=axis))
    case("log_softmax", "F32.large_logits", [torch.tensor([[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0]])],
         lambda v: torch.log_softmax(v[0], dim=1), args={"axis": 1})

    for dt in FLOATS:
        case("layer_norm", f"{dt}.wb", [rnd((3, 8), dt), rnd((8,), dt), rnd((8,), dt)],
             lambda v: F.layer_norm(v[0], (8,), v[1], v[2]), args={"normalized_rank": 1, "weight": True, "bias": True},
             tol_scale=2)
        case("rms_norm", f"{dt}.w", [rnd((3, 8), dt), rnd((8,), dt)],
             lambda v: F.rms_norm(v[0], (8,), v[1], eps=1e-6), args={"normalized_rank": 1, "eps": 1e-6}, tol_scale=2)
    for dt in ("F16", "BF16"):  # |x| ~ 300: x * x overflows F16
        case("layer_norm", f"{dt}.large", [rnd((3, 8), dt) * 300, rnd((8,), dt), rnd((8,), dt)],
             lambda v: F.layer_norm(v[0], (8,), v[1], v[2]), args={"normalized_rank": 1, "weight": True, "bias": True},
             tol_scale=2)
        case("rms_norm", f"{dt}.large", [rnd((3, 8), dt) * 300, rnd((8,), dt)],
             lambda v: F.rms_norm(v[0], (8,), v[1], eps=1e-6), args={"normalized_rank": 1, "eps": 1e-6}, tol_scale=2)
        case("var", f"{dt}.large", [rnd((3, 8), dt) * 300], lambda v: torch.var(v[0], dim=[1]), args={"axes": [1]},
             tol_scale=3)
        case("std", f"{dt}.large", [rnd((3, 8), dt) * 300], lambda v: torch.std(v[0], dim=[1]), args={"axes": [1]},
             tol_scale=3)
    case("layer_norm", "F32.constant_rows", [torch.tensor([[2.0] * 6, [0.0] * 6])], lambda v: F.layer_norm(v[0], (6,)),
         args={"normalized_rank": 1})
    case("rms_norm", "F32.zero_row", [torch.zeros((2, 6))], lambda v: F.rms_norm(v[0], (6,), eps=1e-6),
         args={"normalized_rank": 1})
    case("layer_norm", "F32.plain", [rnd((2, 3, 8), "F32")], lambda v: F.layer_norm(v[0], (8,)),
         args={"normalized_rank": 1}, tol_scale=2)
    case("layer_norm", "F32.weight_only", [rnd((4, 6), "F32"), rnd((6,), "F32")],
         lambda v: F.layer_norm(v[0], (6,), v[1]), args={"normalized_rank": 1, "weight": True}, tol_scale=2)
    case("layer_norm", "F32.rank2", [rnd((2, 3, 4), "F32"), rnd((3, 4), "F32"), rnd((3, 4), "F32")],
         lambda v: F.layer_norm(v[0], (3, 4), v[1], v[2], eps=1e-3),
         args={"normalized_rank": 2, "weight": True, "bias": True, "eps": 1e-3}, tol_scale=3)
    case("layer_norm", "F32.dynamic_rows", [Inp(rnd((5, 8), "F32"), sym={0: "seq"}), rnd((8,), "F32"), rnd((8,), "F32")],
         lambda v: F.layer_norm(v[0], (8,), v[1], v[2]), args={"normalized_rank": 1, "weight": True, "bias": True},
         tol_scale=2)
    case("layer_norm", "F32.transposed", [Inp(rnd((8, 3), "F32"), T01)], lambda v: F.layer_norm(v[0], (8,)),
         args={"normalized_rank": 1}, tol_scale=2)
    case("rms_norm", "F32.plain", [rnd((2, 3, 8), "F32")], lambda v: F.rms_norm(v[0], (8,), eps=1e-6),
         args={"normalized_rank": 1}, tol_scale=2)
    case("rms_norm", "F32.rank2", [rnd((2, 3, 4), "F32"), rnd((3, 4), "F32")],
         lambda v: F.rms_norm(v[0], (3, 4), v[1], eps=1e-5), args={"normalized_rank": 2, "eps": 1e-5}, tol_scale=3)
    case("rms_norm", "F32.dynamic_rows", [Inp(rnd((5, 8), "F32"), sym={0: "seq"}), rnd((8,), "F32")],
         lambda v: F.rms_norm(v[0], (8,), v[1], eps=1e-6), args={"normalized_rank": 1}, tol_scale=2)
    case("rms_norm", "F32.transposed", [Inp(rnd((8, 3), "F32"), T01)], lambda v: F.rms_norm(v[0], (8,), eps=1e-6),
         args={"normalized_rank": 1}, tol_scale=2)

    # ---- linear algebra, convolution, pooling ----
    mm = lambda v: torch.matmul(v[0], v[1])  # noqa: E731
    for dt in FLOATS + ["I32", "I64"]:
        case("matmul", f"{dt}.2d", [rnd((3, 5), dt, lo=-4, hi=5), rnd((5, 4), dt, lo=-4, hi=5)], mm, tol_scale=math.sqrt(5))
    case("matmul", "F32.1dx1d", [rnd((6,), "F32"), rnd((6,), "F32")], mm, tol_scale=3)
    case("matmul", "F32.1dx2d", [rnd((5,), "F32"), rnd((5, 3), "F32")], mm, tol_scale=3)
    case("matmul", "F32.2dx1d", [rnd((4, 5), "F32"), rnd((5,), "F32")], mm, tol_scale=3)
    case("matmul", "F32.batched", [rnd((2, 3, 5), "F32"), rnd((2, 5, 4), "F32")], mm, tol_scale=3)
    case("matmul", "F32.bcast_batch", [rnd((2, 1, 3, 4), "F32"), rnd((5, 4, 2), "F32")], mm, tol_scale=2)
    case("matmul", "F32.3dx2d", [rnd((2, 3, 4), "F32"), rnd((4, 6), "F32")], mm, tol_scale=2)
    case("matmul", "F32.1dx3d", [rnd((4,), "F32"), rnd((2, 4, 3), "F32")], mm, tol_scale=2)
    case("matmul", "F32.transposed_b", [rnd((3, 5), "F32"), Inp(rnd((4, 5), "F32"), T01)], mm, tol_scale=3)
    case("matmul", "F32.transposed_a", [Inp(rnd((5, 3), "F32"), T01), rnd((5, 4), "F32")], mm, tol_scale=3)
    case("matmul", "F32.dynamic_m", [Inp(rnd((6, 5), "F32"), sym={0: "seq"}), rnd((5, 4), "F32")], mm, tol_scale=3)
    case("matmul", "F32.dynamic_k", [Inp(rnd((3, 6), "F32"), sym={1: "seq"}), Inp(rnd((6, 4), "F32"), sym={0: "seq"})],
         mm, tol_scale=3)
    # torch.matmul refuses mixed dtypes; luminal promotes (F32 here), like its elementwise ops.
    case("matmul", "F16xF32.mixed", [rnd((3, 5), "F16"), rnd((5, 4), "F32")],
         lambda v: torch.matmul(v[0].to(v[1].dtype), v[1]), tol_scale=3)
    case("matmul", "F32.k64", [rnd((4, 64), "F32"), rnd((64, 3), "F32")], mm, tol_scale=8)
    for dt in FLOATS:
        case("linear", f"{dt}.bias", [rnd((3, 5), dt), rnd((4, 5), dt), rnd((4,), dt)],
             lambda v: F.linear(v[0], v[1], v[2]), tol_scale=3)
    case("linear", "F32.no_bias", [rnd((2, 3, 5), "F32"), rnd((4, 5), "F32")], lambda v: F.linear(v[0], v[1]),
         tol_scale=3)
    case("linear", "F32.dynamic", [Inp(rnd((2, 6, 5), "F32"), sym={1: "seq"}), rnd((4, 5), "F32"), rnd((4,), "F32")],
         lambda v: F.linear(v[0], v[1], v[2]), tol_scale=3)
    case("linear", "F32.1d", [rnd((5,), "F32"), rnd((4, 5), "F32"), rnd((4,), "F32")],
         lambda v: F.linear(v[0], v[1], v[2]), tol_scale=3)

    def conv1(v, a):
        return F.conv1d(v[0], v[1], v[2] if len(v) > 2 else None, stride=a.get("stride", 1),
                        padding=a.get("padding", 0), dilation=a.get("dilation", 1), groups=a.get("groups", 1))

    def conv2(v, a):
        return F.conv2d(v[0], v[1], v[2] if len(v) > 2 else None, stride=a.get("stride", 1),
                        padding=a.get("padding", 0), dilation=a.get("dilation", 1), groups=a.get("groups", 1))

    for dt in FLOATS:
        a = {"stride": 1, "padding": 0}
        case("conv1d", f"{dt}.basic", [rnd((2, 4, 10), dt), rnd((6, 4, 3), dt), rnd((6,), dt)],
             lambda v, a=a: conv1(v, a), args=a, tol_scale=4)
        a2 = {"stride": [1, 1], "padding": [0, 0]}
        case("conv2d", f"{dt}.basic", [rnd((1, 3, 6, 7), dt), rnd((4, 3, 3, 3), dt), rnd((4,), dt)],
             lambda v, a=a2: conv2(v, a), args=a2, tol_scale=6)
    for tag, a in (("stride2_pad1", {"stride": 2, "padding": 1}), ("dilation2", {"dilation": 2}),
                   ("groups2", {"groups": 2}), ("all", {"stride": 2, "padding": 2, "dilation": 2, "groups": 2})):
        wshape = (6, 4 // a.get("groups", 1), 3)
        case("conv1d", f"F32.{tag}", [rnd((2, 4, 11), "F32"), rnd(wshape, "F32"), rnd((6,), "F32")],
             lambda v, a=a: conv1(v, a), args=a, tol_scale=4)
    case("conv1d", "F32.no_bias", [rnd((1, 2, 8), "F32"), rnd((3, 2, 2), "F32")], lambda v: conv1(v, {}), tol_scale=2)
    case("conv1d", "F32.dynamic_len", [Inp(rnd((1, 2, 9), "F32"), sym={2: "seq"}), rnd((3, 2, 3), "F32"), rnd((3,), "F32")],
         lambda v: conv1(v, {"padding": 1}), args={"padding": 1}, tol_scale=3)
    case("conv1d", "F32.depthwise", [rnd((1, 4, 9), "F32"), rnd((4, 1, 3), "F32")],
         lambda v: conv1(v, {"groups": 4, "padding": 1}), args={"groups": 4, "padding": 1}, tol_scale=2)
    for tag, a in (("stride2_pad1", {"stride": [2, 2], "padding": [1, 1]}),
                   ("asym_stride_pad", {"stride": [1, 2], "padding": [2, 0]}),
                   ("dilation2", {"dilation": [2, 2]}), ("groups2", {"groups": 2}),
                   ("all", {"stride": [2, 1], "padding": [1, 2], "dilation": [1, 2], "groups": 2})):
        wshape = (4, 4 // a.get("groups", 1), 3, 3)
        case("conv2d", f"F32.{tag}", [rnd((2, 4, 7, 8), "F32"), rnd(wshape, "F32"), rnd((4,), "F32")],
             lambda v, a=a: conv2(v, a), args=a, tol_scale=6)
    case("conv2d", "F32.dynamic_hw", [Inp(rnd((1, 2, 6, 7), "F32"), sym={2: "h", 3: "w"}), rnd((3, 2, 3, 3), "F32"),
                                      rnd((3,), "F32")], lambda v: conv2(v, {"padding": [1, 1]}),
         args={"padding": [1, 1]}, tol_scale=4)
    case("conv2d", "I32.basic", [rnd((1, 2, 5, 5), "I32", lo=-3, hi=4), rnd((2, 2, 3, 3), "I32", lo=-3, hi=4)],
         lambda v: conv2([v[0].double(), v[1].double()], {}).to(torch.int32), tol_scale=1)
    case("conv2d", "F32.no_bias_1x1", [rnd((1, 3, 4, 4), "F32"), rnd((2, 3, 1, 1), "F32")], lambda v: conv2(v, {}),
         tol_scale=2)
    case("conv2d", "F32.transposed_input", [Inp(rnd((1, 3, 6, 5), "F32"), {"kind": "transpose", "dims": [2, 3]}),
                                            rnd((2, 3, 3, 3), "F32")], lambda v: conv2(v, {}), tol_scale=5)

    def pool(fn, v, a):
        return fn(v[0], a["kernel"], stride=a.get("stride") or None, padding=a.get("padding", 0))

    for op, fn in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
        for dt in FLOATS:
            a = {"kernel": [2, 2]}
            case(op, f"{dt}.k2", [rnd((1, 2, 6, 6), dt)], lambda v, a=a, fn=fn: pool(fn, v, a), args=a)
        for tag, a in (("k3_s2_p1", {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}),
                       ("k2x3_s1", {"kernel": [2, 3], "stride": [1, 1]}),
                       ("k3_s2_odd", {"kernel": [3, 3], "stride": [2, 2]})):
            case(op, f"F32.{tag}", [rnd((2, 3, 7, 9), "F32")], lambda v, a=a, fn=fn: pool(fn, v, a), args=a)
        case(op, "F32.dynamic_hw", [Inp(rnd((1, 2, 6, 8), "F32"), sym={2: "h", 3: "w"})],
             lambda v, fn=fn: pool(fn, v, {"kernel": [2, 2]}), args={"kernel": [2, 2]})
        case(op, "F32.unbatched_3d", [rnd((2, 6, 6), "F32")],
             lambda v, fn=fn: pool(fn, v, {"kernel": [3, 3], "stride": [3, 3]}), args={"kernel": [3, 3], "stride": [3, 3]})
        case(op, "F32.transposed", [Inp(rnd((1, 2, 6, 4), "F32"), {"kind": "transpose", "dims": [2, 3]})],
             lambda v, fn=fn: pool(fn, v, {"kernel": [2, 2]}), args={"kernel": [2, 2]})
        nan_img = rnd((1, 1, 4, 4), "F32")
        nan_img[0, 0, 1, 2] = float("nan")
        case(op, "F32.nan", [nan_img], lambda v, fn=fn: pool(fn, v, {"kernel": [2, 2]}), args={"kernel": [2, 2]})
        case(op, "F32.negative_pad", [-rnd((1, 1, 4, 4), "F32", "pos")],
             lambda v, fn=fn: pool(fn, v, {"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1]}),
             args={"kernel": [3, 3], "stride": [1, 1], "padding": [1, 1]})

    # ---- movement ----
    def movement(op, ref, shape, args, dtypes=ALL, view_shape=None, dyn=None):
        for dt in dtypes:
            case(op, f"{dt}.basic", [rnd(shape, dt)], lambda v: ref(v[0]), args=args)
        if view_shape is not None:
            case(op, "F32.transposed", [Inp(rnd(view_shape, "F32"), T01)], lambda v: ref(v[0]), args=args)
        if dyn is not None:
            sym, dshape, dargs, dref = dyn
            case(op, "F32.dynamic", [Inp(rnd(dshape, "F32"), sym=sym)], lambda v: dref(v[0]), args=dargs)

    movement("reshape", lambda x: x.reshape(2, 6), (3, 4), {"shape": [2, 6]}, view_shape=(4, 3),
             dyn=({0: "seq"}, (5, 4), {"shape": ["seq", 2, 2]}, lambda x: x.reshape(x.shape[0], 2, 2)))
    case("reshape", "F32.infer", [rnd((2, 3, 4), "F32")], lambda v: v[0].reshape(-1, 4), args={"shape": [-1, 4]})
    case("reshape", "F32.sliced_flatten", [Inp(rnd((4, 6), "F32"), sl(1, 1, 5, 1))], lambda v: v[0].reshape(-1),
         args={"shape": [-1]})
    case("reshape", "F32.transposed_split", [Inp(rnd((4, 6), "F32"), T01)], lambda v: v[0].reshape(3, 2, 4),
         args={"shape": [3, 2, 4]})
    movement("permute", lambda x: x.permute(2, 0, 1), (2, 3, 4), {"dims": [2, 0, 1]}, dtypes=["F32", "I64", "Bool"],
             dyn=({1: "seq"}, (2, 5, 3), {"dims": [1, 2, 0]}, lambda x: x.permute(1, 2, 0)))
    case("permute", "F32.transposed", [Inp(rnd((3, 2, 4), "F32"), T01)], lambda v: v[0].permute(2, 0, 1),
         args={"dims": [2, 0, 1]})
    movement("transpose", lambda x: x.transpose(0, 2), (2, 3, 4), {"dim0": 0, "dim1": 2}, dtypes=["F32", "F16", "I32"],
             view_shape=None, dyn=({0: "seq"}, (5, 3), {"dim0": 0, "dim1": 1}, lambda x: x.transpose(0, 1)))
    case("transpose", "F32.negative_axes", [rnd((2, 3, 4), "F32")], lambda v: v[0].transpose(-1, -2),
         args={"dim0": -1, "dim1": -2})
    case("t", "F32.2d", [rnd((3, 4), "F32")], lambda v: v[0].t())
    case("t", "F32.3d_last_two", [rnd((2, 3, 4), "F32")], lambda v: v[0].transpose(-2, -1))
    movement("expand", lambda x: x.expand(3, 4), (3, 1), {"shape": [3, 4]}, dtypes=["F32", "BF16", "I8", "Bool"],
             dyn=({0: "seq"}, (5, 1), {"shape": ["seq", 3]}, lambda x: x.expand(-1, 3)))
    case("expand", "F32.new_leading", [rnd((4,), "F32")], lambda v: v[0].expand(2, 3, 4), args={"shape": [2, 3, 4]})
    case("expand", "F32.minus_one", [rnd((3, 1), "F32")], lambda v: v[0].expand(-1, 5), args={"shape": [-1, 5]})
    case("expand", "F32.transposed", [Inp(rnd((1, 3), "F32"), T01)], lambda v: v[0].expand(3, 4),
         args={"shape": [3, 4]})
    case("expand_dim", "F32.middle", [rnd((3, 4), "F32")], lambda v: v[0].unsqueeze(1).expand(3, 5, 4),
         args={"axis": 1, "size": 5})
    movement("unsqueeze", lambda x: x.unsqueeze(1), (3, 4), {"axis": 1}, dtypes=["F32", "U8"], view_shape=(4, 3))
    case("unsqueeze", "F32.negative", [rnd((3, 4), "F32")], lambda v: v[0].unsqueeze(-1), args={"axis": -1})
    case("unsqueeze", "F32.front_dynamic", [Inp(rnd((5, 2), "F32"), sym={0: "seq"})], lambda v: v[0].unsqueeze(0),
         args={"axis": 0})
    movement("squeeze", lambda x: x.squeeze(1), (3, 1, 4), {"axis": 1}, dtypes=["F32", "I32"])
    case("squeeze", "F32.all", [rnd((1, 3, 1, 4), "F32")], lambda v: v[0].squeeze(), args={})
    case("squeeze", "F32.non_one_noop", [rnd((3, 4), "F32")], lambda v: v[0].squeeze(0), args={"axis": 0})
    case("flatten", "F32.all", [rnd((2, 3, 4), "F32")], lambda v: v[0].flatten(), args={})
    case("flatten", "F32.middle", [rnd((2, 3, 4, 2), "F32")], lambda v: v[0].flatten(1, 2), args={"start": 1, "end": 2})
    case("flatten", "F32.transposed", [Inp(rnd((3, 2, 4), "F32"), T01)], lambda v: v[0].flatten(), args={})

    def slice_ref(x, a):
        idx = [slice(None)] * x.dim()
        idx[a["axis"]] = slice(a.get("start", 0), a.get("end"), a.get("step", 1))
        return x[tuple(idx)]

    for tag, a in (("step2", {"axis": 1, "start": 1, "end": 8, "step": 2}),
                   ("step3_to_end", {"axis": 1, "start": 0, "end": None, "step": 3}),
                   ("negative_start", {"axis": 0, "start": -2, "end": None, "step": 1}),
                   ("negative_end", {"axis": 1, "start": 1, "end": -1, "step": 1}),
                   ("end_past", {"axis": 1, "start": 2, "end": 100, "step": 2}),
                   ("empty", {"axis": 1, "start": 5, "end": 3, "step": 1})):
        case("slice", f"F32.{tag}", [rnd((4, 9), "F32")], lambda v, a=a: slice_ref(v[0], a), args=a)
    for dt in ("F16", "I64", "Bool"):
        a = {"axis": 0, "start": 1, "end": 4, "step": 2}
        case("slice", f"{dt}.step2", [rnd((5, 3), dt)], lambda v, a=a: slice_ref(v[0], a), args=a)
    a = {"axis": 0, "start": 1, "end": 3, "step": 1}
    case("slice", "F32.transposed", [Inp(rnd((3, 4), "F32"), T01)], lambda v, a=a: slice_ref(v[0], a), args=a)
    a = {"axis": 0, "start": 1, "end": None, "step": 2}
    case("slice", "F32.dynamic_step2", [Inp(rnd((7, 2), "F32"), sym={0: "seq"})], lambda v, a=a: slice_ref(v[0], a),
         args=a)
    a = {"axis": 0, "start": -3, "end": None, "step": 1}
    case("slice", "F32.dynamic_negative", [Inp(rnd((7, 2), "F32"), sym={0: "seq"})], lambda v, a=a: slice_ref(v[0], a),
         args=a)
    a = {"axis": 1, "start": 1, "end": 4, "step": 2}
    case("slice", "F32.sliced_twice", [Inp(rnd((3, 10), "F32"), sl(1, 2, 10, 1))], lambda v, a=a: slice_ref(v[0], a),
         args=a)
    FLIP0 = {"kind": "flip", "dims": [0]}
    a = {"axis": 0, "start": 0, "end": None, "step": 2}
    case("slice", "F32.flipped_step2", [Inp(rnd((7, 3), "F32"), FLIP0)], lambda v, a=a: slice_ref(v[0], a), args=a)
    case("reshape", "F32.flipped", [Inp(rnd((4, 6), "F32"), FLIP0)], lambda v: v[0].reshape(2, 12), args={"shape": [2, 12]})
    case("reshape", "F32.expanded", [Inp(rnd((1, 6), "F32"), {"kind": "expand", "shape": [4, 6]})],
         lambda v: v[0].reshape(3, 8), args={"shape": [3, 8]})
    case("reshape", "F32.sliced_step_split", [Inp(rnd((3, 12), "F32"), sl(1, 0, 12, 2))], lambda v: v[0].reshape(3, 2, 3),
         args={"shape": [3, 2, 3]})
    case("concat", "F32.flipped_and_sliced", [Inp(rnd((3, 4), "F32"), FLIP0), Inp(rnd((3, 8), "F32"), sl(1, 1, 8, 3))],
         lambda v: torch.cat(v, dim=1), args={"axis": 1})
    case("pad", "F32.negative_crop", [rnd((3, 6), "F32")], lambda v: F.pad(v[0], (-1, -2)),
         args={"axis": 1, "before": -1, "after": -2})
    case("pad", "F32.sliced_view", [Inp(rnd((3, 8), "F32"), sl(1, 1, 8, 2))], lambda v: F.pad(v[0], (1, 1)),
         args={"axis": 1, "before": 1, "after": 1})
    case("repeat", "F32.flipped", [Inp(rnd((2, 3), "F32"), FLIP0)], lambda v: v[0].repeat(2, 2), args={"times": [2, 2]})
    case("tril", "F32.dynamic_rect", [Inp(rnd((4, 6), "F32"), sym={0: "rows", 1: "cols"})], lambda v: v[0].tril(1),
         args={"diagonal": 1})
    case("narrow", "F32.basic", [rnd((4, 6), "F32")], lambda v: v[0].narrow(1, 2, 3), args={"axis": 1, "start": 2, "length": 3})

    def pad_ref(x, a):
        p = [0] * (2 * x.dim())
        ax = a["axis"] % x.dim()
        k = 2 * (x.dim() - 1 - ax)
        p[k], p[k + 1] = a["before"], a["after"]
        return F.pad(x, p, value=a.get("value", 0.0))

    for dt in ("F32", "F16", "BF16", "F64", "I32", "I64", "Bool"):
        a = {"axis": 1, "before": 2, "after": 1}
        case("pad", f"{dt}.zero", [rnd((3, 4), dt)], lambda v, a=a: pad_ref(v[0], a), args=a)
    for dt in ("F32", "I32"):
        a = {"axis": 0, "before": 1, "after": 2, "value": 3.0}
        case("pad", f"{dt}.value3", [rnd((3, 4), dt)], lambda v, a=a: pad_ref(v[0], a), args=a)
    a = {"axis": -1, "before": 0, "after": 3, "value": -1.5}
    case("pad", "F32.transposed_value", [Inp(rnd((4, 3), "F32"), T01)], lambda v, a=a: pad_ref(v[0], a), args=a)
    a = {"axis": 0, "before": 2, "after": 0, "value": float("-inf")}
    case("pad", "F32.dynamic_neg_inf", [Inp(rnd((5, 3), "F32"), sym={0: "seq"})], lambda v, a=a: pad_ref(v[0], a), args=a)

    for dt in ("F32", "F16", "I64", "Bool"):
        case("concat", f"{dt}.axis1", [rnd((2, 3), dt), rnd((2, 1), dt), rnd((2, 4), dt)],
             lambda v: torch.cat(v, dim=1), args={"axis": 1})
    case("concat", "F32.axis0_transposed", [Inp(rnd((3, 2), "F32"), T01), rnd((4, 3), "F32")],
         lambda v: torch.cat(v, dim=0), args={"axis": 0})
    case("concat", "F16xF32.mixed", [rnd((2, 3), "F16"), rnd((2, 3), "F32")], lambda v: torch.cat(v, dim=-1),
         args={"axis": -1})
    case("concat", "F32.dynamic", [Inp(rnd((5, 2), "F32"), sym={0: "seq"}), rnd((3, 2), "F32")],
         lambda v: torch.cat(v, dim=0), args={"axis": 0})
    case("concat", "F32.special", [special("F32"), special("F32").flip(0)], lambda v: torch.cat(v, dim=0), args={"axis": 0})
    for dt in ("F32", "I32", "Bool"):
        case("stack", f"{dt}.axis0", [rnd((2, 3), dt), rnd((2, 3), dt)], lambda v: torch.stack(v, dim=0), args={"axis": 0})
    case("stack", "F32.axis-1", [rnd((2, 3), "F32"), rnd((2, 3), "F32"), rnd((2, 3), "F32")],
         lambda v: torch.stack(v, dim=-1), args={"axis": -1})
    case("stack", "F32.dynamic", [Inp(rnd((4, 2), "F32"), sym={0: "seq"}), Inp(rnd((4, 2), "F32"), sym={0: "seq"})],
         lambda v: torch.stack(v, dim=1), args={"axis": 1})
    for dt in ("F32", "I64"):
        case("split", f"{dt}.sizes", [rnd((3, 7), dt)], lambda v: v[0].split([2, 4, 1], dim=1),
             args={"sizes": [2, 4, 1], "axis": 1})
    case("split", "F32.dynamic_other_axis", [Inp(rnd((5, 8), "F32"), sym={0: "seq"})], lambda v: v[0].split([2, 6], dim=1),
         args={"sizes": [2, 6], "axis": 1})
    case("split", "F32.transposed", [Inp(rnd((6, 2), "F32"), T01)], lambda v: v[0].split([3, 3], dim=1),
         args={"sizes": [3, 3], "axis": 1})
    case("chunk", "F32.even", [rnd((6, 2), "F32")], lambda v: v[0].chunk(3, dim=0), args={"chunks": 3, "axis": 0})
    case("chunk", "F32.uneven", [rnd((2, 7), "F32")], lambda v: v[0].chunk(3, dim=1), args={"chunks": 3, "axis": 1})
    case("chunk", "F32.uneven_6_by_4", [rnd((6,), "F32")], lambda v: v[0].chunk(4, dim=0), args={"chunks": 4, "axis": 0})
    for dt in ("F32", "I32", "Bool"):
        case("repeat", f"{dt}.2d", [rnd((2, 3), dt)], lambda v: v[0].repeat(2, 3), args={"times": [2, 3]})
    case("repeat", "F32.extra_dims", [rnd((2, 3), "F32")], lambda v: v[0].repeat(2, 1, 2), args={"times": [2, 1, 2]})
    case("repeat", "F32.transposed", [Inp(rnd((3, 2), "F32"), T01)], lambda v: v[0].repeat(3, 1), args={"times": [3, 1]})
    case("repeat", "F32.dynamic", [Inp(rnd((4, 2), "F32"), sym={0: "seq"})], lambda v: v[0].repeat(2, 2),
         args={"times": [2, 2]})
    for dt in ("F32", "I8", "Bool"):
        case("flip", f"{dt}.axis1", [rnd((3, 4), dt)], lambda v: v[0].flip(1), args={"dims": [1]})
    case("flip", "F32.both", [rnd((2, 3, 4), "F32")], lambda v: v[0].flip([0, 2]), args={"dims": [0, 2]})
    case("flip", "F32.transposed", [Inp(rnd((3, 4), "F32"), T01)], lambda v: v[0].flip(0), args={"dims": [0]})
    case("flip", "F32.dynamic", [Inp(rnd((5, 2), "F32"), sym={0: "seq"})], lambda v: v[0].flip(0), args={"dims": [0]})
    for op in ("tril", "triu"):
        for dt in ("F32", "F16", "I64", "Bool"):
            case(op, f"{dt}.square", [rnd((4, 4), dt)], lambda v, op=op: getattr(v[0], op)(), args={})
        for d in (-1, 1, 2):
            case(op, f"F32.diag{d}", [rnd((3, 5), "F32")], lambda v, op=op, d=d: getattr(v[0], op)(d), args={"diagonal": d})
        case(op, "F32.batched", [rnd((2, 3, 3), "F32")], lambda v, op=op: getattr(v[0], op)(), args={})
        case(op, "F32.dynamic", [Inp(rnd((5, 5), "F32"), sym={0: "seq", 1: "seq"})], lambda v, op=op: getattr(v[0], op)(),
             args={})
        case(op, "F32.transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v, op=op: getattr(v[0], op)(), args={})
        case(op, "F32.special", [special("F32").reshape(2, 5)], lambda v, op=op: getattr(v[0], op)(), args={})

    # ---- indexing ----
    def idx(shape, n, dt="I64"):
        return torch.randint(0, n, shape, generator=GEN).to(TD[dt])

    for dt in ("F32", "F16", "BF16", "F64", "I32", "I64", "Bool"):
        case("gather", f"{dt}.axis1", [rnd((3, 5), dt), idx((3, 4), 5)], lambda v: torch.gather(v[0], 1, v[1]),
             args={"axis": 1})
    case("gather", "F32.axis0", [rnd((4, 3), "F32"), idx((2, 3), 4)], lambda v: torch.gather(v[0], 0, v[1]),
         args={"axis": 0})
    case("gather", "F32.smaller_index", [rnd((4, 5), "F32"), idx((2, 3), 5)], lambda v: torch.gather(v[0], 1, v[1]),
         args={"axis": 1})
    case("gather", "F32.I32_index", [rnd((3, 5), "F32"), idx((3, 2), 5, "I32")],
         lambda v: torch.gather(v[0], 1, v[1].long()), args={"axis": 1})
    case("gather", "F32.3d_axis-1", [rnd((2, 3, 4), "F32"), idx((2, 3, 2), 4)], lambda v: torch.gather(v[0], -1, v[1]),
         args={"axis": -1})
    case("gather", "F32.transposed", [Inp(rnd((5, 3), "F32"), T01), idx((3, 4), 5)], lambda v: torch.gather(v[0], 1, v[1]),
         args={"axis": 1})
    case("gather", "F32.dynamic", [Inp(rnd((6, 4), "F32"), sym={0: "seq"}), Inp(idx((6, 2), 4), sym={0: "seq"})],
         lambda v: torch.gather(v[0], 1, v[1]), args={"axis": 1})

    def uniq_idx(rows, cols, n, axis):
        # unique positions along `axis`: a permutation slice per column/row
        if axis == 0:
            return torch.stack([torch.randperm(n, generator=GEN)[:rows] for _ in range(cols)], dim=1)
        return torch.stack([torch.randperm(n, generator=GEN)[:cols] for _ in range(rows)], dim=0)

    for dt in ("F32", "F16", "BF16", "F64", "I32", "I64"):
        case("scatter", f"{dt}.axis1", [rnd((3, 5), dt), uniq_idx(3, 3, 5, 1), rnd((3, 3), dt)],
             lambda v: v[0].scatter(1, v[1], v[2]), args={"axis": 1})
    case("scatter", "F32.axis0", [rnd((5, 3), "F32"), uniq_idx(2, 3, 5, 0), rnd((2, 3), "F32")],
         lambda v: v[0].scatter(0, v[1], v[2]), args={"axis": 0})
    case("scatter", "F32.src_larger", [rnd((4, 5), "F32"), uniq_idx(2, 2, 5, 1), rnd((3, 4), "F32")],
         lambda v: v[0].scatter(1, v[1], v[2]), args={"axis": 1})
    case("scatter", "F32.transposed_self", [Inp(rnd((5, 3), "F32"), T01), uniq_idx(3, 2, 5, 1), rnd((3, 2), "F32")],
         lambda v: v[0].scatter(1, v[1], v[2]), args={"axis": 1})
    case("scatter", "F32.3d", [rnd((2, 3, 4), "F32"), torch.stack([uniq_idx(3, 2, 4, 1) for _ in range(2)]),
                               rnd((2, 3, 2), "F32")], lambda v: v[0].scatter(2, v[1], v[2]), args={"axis": 2})
    for dt in ("F32", "F16", "I64", "Bool"):
        case("index_select", f"{dt}.axis0", [rnd((5, 3), dt), idx((4,), 5)], lambda v: torch.index_select(v[0], 0, v[1]),
             args={"axis": 0})
    case("index_select", "F32.axis1_repeat", [rnd((3, 5), "F32"), torch.tensor([4, 0, 4, 2])],
         lambda v: torch.index_select(v[0], 1, v[1]), args={"axis": 1})
    case("index_select", "F32.I32_index", [rnd((5, 3), "F32"), idx((3,), 5, "I32")],
         lambda v: torch.index_select(v[0], 0, v[1]), args={"axis": 0})
    case("index_select", "F32.transposed", [Inp(rnd((3, 5), "F32"), T01), idx((4,), 5)],
         lambda v: torch.index_select(v[0], 0, v[1]), args={"axis": 0})
    case("index_select", "F32.dynamic_source", [Inp(rnd((6, 3), "F32"), sym={0: "seq"}), idx((4,), 6)],
         lambda v: torch.index_select(v[0], 0, v[1]), args={"axis": 0})
    case("scatter", "F32.dynamic", [Inp(rnd((5, 4), "F32"), sym={0: "seq"}), Inp(uniq_idx(5, 2, 4, 1), sym={0: "seq"}),
                                    Inp(rnd((5, 2), "F32"), sym={0: "seq"})], lambda v: v[0].scatter(1, v[1], v[2]),
         args={"axis": 1})
    case("index_select", "F32.dynamic_index", [rnd((5, 3), "F32"), Inp(idx((6,), 5), sym={0: "seq"})],
         lambda v: torch.index_select(v[0], 0, v[1]), args={"axis": 0})
    for dt in ("F32", "F16", "BF16", "F64"):
        case("embedding", f"{dt}.2d_ids", [rnd((10, 4), dt), idx((2, 3), 10)], lambda v: F.embedding(v[1], v[0]))
    case("embedding", "F32.I32_ids", [rnd((10, 4), "F32"), idx((5,), 10, "I32")], lambda v: F.embedding(v[1], v[0]))
    case("embedding", "F32.dynamic_ids", [rnd((10, 4), "F32"), Inp(idx((1, 6), 10), sym={1: "seq"})],
         lambda v: F.embedding(v[1], v[0]))
    case("one_hot", "I64.1d", [idx((5,), 4)], lambda v: F.one_hot(v[0], 4), args={"num_classes": 4})
    case("one_hot", "I64.2d", [idx((2, 3), 6)], lambda v: F.one_hot(v[0], 6), args={"num_classes": 6})
    case("one_hot", "I32.1d", [idx((5,), 3, "I32")], lambda v: F.one_hot(v[0].long(), 3), args={"num_classes": 3})
    case("one_hot", "I64.dynamic", [Inp(idx((6,), 4), sym={0: "seq"})], lambda v: F.one_hot(v[0], 4),
         args={"num_classes": 4})

    # ---- sorting ----
    def topk_ref(x, a):
        r = torch.topk(x, a["k"], dim=a.get("axis", -1), largest=a.get("largest", True), sorted=True)
        return r.values, r.indices

    for dt in FLOATS + ["I32", "I64"]:
        a = {"k": 3}
        case("topk", f"{dt}.k3", [rnd((4, 7), dt, "distinct")], lambda v, a=a: topk_ref(v[0], a), args=a)
    for tag, a in (("smallest", {"k": 2, "largest": False}), ("axis0", {"k": 2, "axis": 0}),
                   ("k_full", {"k": 5})):
        case("topk", f"F32.{tag}", [rnd((3, 5), "F32", "distinct")], lambda v, a=a: topk_ref(v[0], a), args=a)
    case("topk", "F32.transposed", [Inp(rnd((6, 3), "F32", "distinct"), T01)], lambda v: topk_ref(v[0], {"k": 2}),
         args={"k": 2})
    case("topk", "F32.dynamic", [Inp(rnd((2, 9), "F32", "distinct"), sym={1: "seq"})], lambda v: topk_ref(v[0], {"k": 3}),
         args={"k": 3})
    for dt in FLOATS + ["I32", "I64"]:
        case("argsort", f"{dt}.axis-1", [rnd((4, 6), dt, "distinct")], lambda v: torch.argsort(v[0], dim=-1, stable=True))
        case("sort", f"{dt}.axis-1", [rnd((4, 6), dt, "distinct")],
             lambda v: tuple(torch.sort(v[0], dim=-1, stable=True)))
    case("argsort", "F32.descending", [rnd((3, 5), "F32", "distinct")],
         lambda v: torch.argsort(v[0], dim=-1, descending=True, stable=True), args={"descending": True})
    case("argsort", "F32.axis0", [rnd((5, 3), "F32", "distinct")], lambda v: torch.argsort(v[0], dim=0, stable=True),
         args={"axis": 0})
    case("argsort", "F32.ties_stable", [torch.tensor([[2.0, 1.0, 2.0, 1.0, 0.0, 2.0], [3.0, 3.0, 3.0, 1.0, 1.0, 0.0]])],
         lambda v: torch.argsort(v[0], dim=-1, stable=True))
    case("argsort", "F32.ties_stable_descending", [torch.tensor([[2.0, 1.0, 2.0, 1.0, 0.0, 2.0]])],
         lambda v: torch.argsort(v[0], dim=-1, descending=True, stable=True), args={"descending": True})
    case("argsort", "F32.transposed", [Inp(rnd((6, 3), "F32", "distinct"), T01)],
         lambda v: torch.argsort(v[0], dim=-1, stable=True))
    case("argsort", "F32.dynamic", [Inp(rnd((2, 7), "F32", "distinct"), sym={1: "seq"})],
         lambda v: torch.argsort(v[0], dim=-1, stable=True))
    nanrow = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), 0.5, float("-inf")]])
    case("sort", "F32.nan", [nanrow], lambda v: tuple(torch.sort(v[0], dim=-1, stable=True)))
    case("sort", "F32.nan_descending", [nanrow], lambda v: tuple(torch.sort(v[0], dim=-1, descending=True, stable=True)),
         args={"descending": True})
    case("topk", "F32.nan", [nanrow], lambda v: topk_ref(v[0], {"k": 3}), args={"k": 3})
    case("topk", "F32.nan_smallest", [nanrow], lambda v: topk_ref(v[0], {"k": 3, "largest": False}),
         args={"k": 3, "largest": False})
    case("sort", "F32.descending_axis0", [rnd((5, 3), "F32", "distinct")],
         lambda v: tuple(torch.sort(v[0], dim=0, descending=True, stable=True)), args={"axis": 0, "descending": True})
    case("sort", "F32.dynamic", [Inp(rnd((7, 2), "F32", "distinct"), sym={0: "seq"})],
         lambda v: tuple(torch.sort(v[0], dim=0, stable=True)), args={"axis": 0})

    # ---- cast ----
    pairs = [("F32", "F16"), ("F32", "BF16"), ("F32", "F64"), ("F64", "F32"), ("F16", "F32"), ("BF16", "F32"),
             ("F16", "BF16"), ("BF16", "F16"), ("F32", "I32"), ("F32", "I64"), ("F64", "I64"), ("F16", "I32"),
             ("F32", "I8"), ("F32", "Bool"), ("I32", "F32"), ("I64", "F16"), ("I64", "I32"), ("I32", "I8"),
             ("I64", "U8"), ("U8", "I32"), ("I8", "I64"), ("I32", "Bool"), ("Bool", "F32"), ("Bool", "I64"),
             ("U8", "F32"), ("F32", "U8"), ("I8", "F16")]
    for src, dst in pairs:
        x = rnd((3, 5), src) * 4 if src in FLOATS else rnd((3, 5), src)
        if dst == "U8" and src in FLOATS:
            x = x.abs()
        case("cast", f"{src}->{dst}", [x], lambda v, dst=dst: v[0].to(TD[dst]), args={"dtype": dst}, upcast=False)
    case("cast", "I32->I8.wrap", [torch.tensor([127, 128, 255, -129, 300, -1000], dtype=torch.int32)],
         lambda v: v[0].to(torch.int8), args={"dtype": "I8"}, upcast=False)
    case("cast", "F32->I32.trunc", [torch.tensor([-2.7, -0.5, 0.5, 2.7, -3.0, 1e6 + 0.9])],
         lambda v: v[0].to(torch.int32), args={"dtype": "I32"}, upcast=False)
    case("cast", "F32->F16.overflow_rounding", [torch.tensor([70000.0, 1e-8, 65519.0, 65520.0, 1.0009765625, 2049.0])],
         lambda v: v[0].to(torch.float16), args={"dtype": "F16"}, upcast=False)
    case("cast", "F32->BF16.rounding", [torch.tensor([1.00390625, 1.01171875, 3e38, 1e-40, -2.5])],
         lambda v: v[0].to(torch.bfloat16), args={"dtype": "BF16"}, upcast=False)
    case("cast", "F32->Bool.special", [special("F32")], lambda v: v[0].to(torch.bool), args={"dtype": "Bool"},
         upcast=False)
    case("cast", "F32->F16.transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v: v[0].half(), args={"dtype": "F16"},
         upcast=False)
    case("cast", "F32->I64.dynamic", [Inp(rnd((5, 3), "F32") * 5, sym={0: "seq"})], lambda v: v[0].long(),
         args={"dtype": "I64"}, upcast=False)
    gen_more_elementwise()
    gen_more_reductions()
    gen_more_movement()
    gen_more_nn()
    return CASES


# Values where the naive formulas lose accuracy or sign: tiny, near 1, large, signed zeros.
NEAR = [1e-30, -1e-30, 1e-10, -1e-10, 1e-5, -1e-5, 0.3, -0.7, 0.999, -0.999, 1.0, -1.0, 1.5, 30.0, -30.0,
        88.0, 89.0, -89.0, 1e10, 1e30, 3e38]


def near(dt):
    return torch.tensor(NEAR, dtype=torch.float64).to(TD[dt])


def gen_more_elementwise():
    """The functions PyTorch users reach for beyond the basics (issue 11 item 5)."""
    unary = {
        "log1p": (torch.log1p, "pos"), "expm1": (torch.expm1, "normal"), "log10": (torch.log10, "pos"),
        "trunc": (torch.trunc, "normal"), "asin": (torch.asin, "unit"), "acos": (torch.acos, "unit"),
        "atan": (torch.atan, "normal"), "sinh": (torch.sinh, "normal"), "cosh": (torch.cosh, "normal"),
        "asinh": (torch.asinh, "normal"), "acosh": (torch.acosh, "ge1"), "atanh": (torch.atanh, "unit"),
        "selu": (F.selu, "normal"), "mish": (F.mish, "normal"), "hardswish": (F.hardswish, "normal"),
        "hardsigmoid": (F.hardsigmoid, "normal"), "logsigmoid": (F.logsigmoid, "normal"),
        "softsign": (F.softsign, "normal"),
    }
    for op, (fn, kind) in unary.items():
        ints = ("I32", "I64") if op not in ("trunc", "selu", "mish", "hardswish", "hardsigmoid", "logsigmoid",
                                            "softsign") else (("I32", "I64") if op == "trunc" else ())
        gen_unary(op, lambda v, fn=fn: fn(v[0]), kind=kind, int_dtypes=ints)
        for dt in ("F32", "F64"):
            # tol_scale 0: a purely relative tolerance, so tiny results must be accurate too.
            case(op, f"{dt}.near", [near(dt)], lambda v, fn=fn: fn(v[0]), tol_scale=0)
            case(op, f"{dt}.near_neg", [-near(dt)], lambda v, fn=fn: fn(v[0]), tol_scale=0)
    for dt in ("F16", "BF16"):
        for op in ("log1p", "expm1", "asinh", "atanh", "sinh"):
            case(op, f"{dt}.near", [torch.tensor([1e-3, -1e-3, 0.25, -0.5, 0.9, 2.0, 8.0], dtype=TD[dt])],
                 lambda v, op=op: getattr(torch, op)(v[0]))
    case("trunc", "F32.halves", [torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, -3.99, 1e7 + 0.5])],
         lambda v: torch.trunc(v[0]))
    gen_unary("relu6", lambda v: F.relu6(v[0]), int_dtypes=("I32", "I64"))
    for op, fn in (("isnan", torch.isnan), ("isinf", torch.isinf), ("isfinite", torch.isfinite)):
        for dt in FLOATS:
            case(op, f"{dt}.special", [special(dt)], lambda v, fn=fn: fn(v[0]))
        case(op, "F32.transposed", [Inp(special("F32").reshape(2, 5), T01)], lambda v, fn=fn: fn(v[0]))
        case(op, "F32.dynamic", [Inp(special("F32").reshape(5, 2), sym={0: "seq"})], lambda v, fn=fn: fn(v[0]))
        for dt in ("I32", "U8", "Bool"):
            case(op, f"{dt}.2d", [rnd((3, 4), dt)], lambda v, fn=fn: fn(v[0]))
    for dt in FLOATS:
        # Native dtype: in float64 the default posinf would be float64's max (inf once rounded).
        case("nan_to_num", f"{dt}.default", [special(dt)], lambda v: torch.nan_to_num(v[0]), upcast=False)
    case("nan_to_num", "F32.values", [special("F32")], lambda v: torch.nan_to_num(v[0], 1.5, 100.0, -7.0),
         args={"nan": 1.5, "posinf": 100.0, "neginf": -7.0})
    case("nan_to_num", "F32.transposed", [Inp(special("F32").reshape(2, 5), T01)], lambda v: torch.nan_to_num(v[0]),
         upcast=False)
    case("nan_to_num", "I32.2d", [rnd((3, 4), "I32")], lambda v: torch.nan_to_num(v[0]))
    for op, fn, args in (("elu", lambda x: F.elu(x), {}), ("elu", lambda x: F.elu(x, 0.5), {"alpha": 0.5}),
                         ("celu", lambda x: F.celu(x, 2.0), {"alpha": 2.0}),
                         ("hardtanh", lambda x: F.hardtanh(x), {}),
                         ("hardtanh", lambda x: F.hardtanh(x, -0.5, 2.0), {"min": -0.5, "max": 2.0})):
        tag = "default" if not args else "_".join(f"{k}{v}" for k, v in args.items())
        for dt in FLOATS:
            case(op, f"{dt}.{tag}", [rnd((3, 5), dt)], lambda v, fn=fn: fn(v[0]), args=args)
        case(op, f"F32.{tag}_special", [special("F32")], lambda v, fn=fn: fn(v[0]), args=args)
        case(op, f"F32.{tag}_transposed", [Inp(rnd((5, 3), "F32"), T01)], lambda v, fn=fn: fn(v[0]), args=args)
        case(op, f"F32.{tag}_wide", [rnd((24,), "F32", "uniform", lo=-40, hi=40)], lambda v, fn=fn: fn(v[0]), args=args)
    case("hardtanh", "I32.2d", [rnd((3, 4), "I32")], lambda v: F.hardtanh(v[0], -2, 3), args={"min": -2, "max": 3})
    for dt in FLOATS:
        case("glu", f"{dt}.axis-1", [rnd((3, 6), dt)], lambda v: F.glu(v[0], -1), args={"axis": -1})
    case("glu", "F32.axis0", [rnd((4, 3), "F32")], lambda v: F.glu(v[0], 0), args={"axis": 0})
    case("glu", "F32.transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v: F.glu(v[0], 1), args={"axis": 1})
    case("glu", "F32.dynamic", [Inp(rnd((5, 4), "F32"), sym={0: "seq"})], lambda v: F.glu(v[0], 1), args={"axis": 1})

    # fmod: the sign follows the dividend (torch.fmod), unlike remainder.
    gen_binary("fmod", lambda v: torch.fmod(v[0], v[1]), dtypes=FLOATS + ["I32", "I64", "I8"], nonzero_b=True,
               scalars=(3.0, -2.5), specials=False)
    case("fmod", "I32.signs", [torch.tensor([7, -7, 7, -7, 0, 6, -6], dtype=torch.int32),
                               torch.tensor([3, 3, -3, -3, 5, -4, 3], dtype=torch.int32)], lambda v: torch.fmod(v[0], v[1]))
    case("fmod", "F32.signs", [torch.tensor([7.5, -7.5, 7.5, -7.5, -0.0, 0.0, -1e-30, 5.0]),
                               torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 1.0, 2.5])], lambda v: torch.fmod(v[0], v[1]))
    case("fmod", "F32.special", [special("F32").repeat_interleave(10), special("F32").repeat(10)],
         lambda v: torch.fmod(v[0], v[1]))
    case("fmod", "I64.large", [torch.tensor([2**60 + 7, -(2**60) - 3, -5], dtype=torch.int64),
                               torch.tensor([3, 7, 2], dtype=torch.int64)], lambda v: torch.fmod(v[0], v[1]))
    # atan2: every quadrant, the axes, signed zeros and infinities.
    gen_binary("atan2", lambda v: torch.atan2(v[0], v[1]), dtypes=FLOATS + ["I32"], scalars=(), specials=False)
    for dt in ("F32", "F64"):
        sp = special(dt)
        case("atan2", f"{dt}.special_x_special", [sp.repeat_interleave(len(SPECIAL)), sp.repeat(len(SPECIAL))],
             lambda v: torch.atan2(v[0], v[1]))
        case("atan2", f"{dt}.scales", [near(dt), near(dt).flip(0)], lambda v: torch.atan2(v[0], v[1]), tol_scale=0)
    for op, fn in (("asin", torch.asin), ("acos", torch.acos), ("atanh", torch.atanh), ("acosh", torch.acosh)):
        case(op, "F32.edges", [torch.tensor([1.0, -1.0, 0.0, -0.0, 1.0000001, -1.5, 0.9999999, 2.0])],
             lambda v, fn=fn: fn(v[0]))

    # logic
    for dt in ("Bool", "I32", "F32"):
        case("logical_xor", f"{dt}.same", [rnd((3, 4), dt), rnd((3, 4), dt)], lambda v: torch.logical_xor(v[0], v[1]))
    case("logical_xor", "F32.special", [special("F32"), special("F32").flip(0)], lambda v: torch.logical_xor(v[0], v[1]))
    case("logical_xor", "Bool.bcast", [rnd((3, 1), "Bool"), rnd((4,), "Bool")], lambda v: torch.logical_xor(v[0], v[1]))
    ints_full = {"I8": (-128, 128), "U8": (0, 256), "I32": (-2**31, 2**31), "I64": (-2**62, 2**62)}
    for op, fn in (("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or),
                   ("bitwise_xor", torch.bitwise_xor)):
        for dt, (lo, hi) in ints_full.items():
            case(op, f"{dt}.full_range", [torch.randint(lo, hi, (3, 5), generator=GEN, dtype=TD[dt]),
                                          torch.randint(lo, hi, (3, 5), generator=GEN, dtype=TD[dt])],
                 lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "I64.extremes", [torch.tensor([-2**63, 2**63 - 1, -1, 0, 2**62, -2**62, 12345], dtype=torch.int64),
                                  torch.tensor([-1, -1, 2**63 - 1, -1, 2**62 + 1, -2**63, -12345], dtype=torch.int64)],
             lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "Bool.same", [rnd((3, 4), "Bool"), rnd((3, 4), "Bool")], lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "I32.bcast_transposed", [Inp(rnd((4, 3), "I32", lo=-50, hi=50), T01), rnd((4,), "I32", lo=-50, hi=50)],
             lambda v, fn=fn: fn(v[0], v[1]))
        case(op, "I64xI32.mixed", [rnd((3, 4), "I64", lo=-50, hi=50), rnd((3, 4), "I32", lo=-50, hi=50)],
             lambda v, fn=fn: fn(v[0], v[1]))
    for dt, (lo, hi) in ints_full.items():
        case("bitwise_not", f"{dt}.full_range", [torch.randint(lo, hi, (3, 5), generator=GEN, dtype=TD[dt])],
             lambda v: torch.bitwise_not(v[0]))
    case("bitwise_not", "Bool.2d", [rnd((3, 4), "Bool")], lambda v: torch.bitwise_not(v[0]))
    for dt in ("F32", "I64", "Bool", "F16"):
        case("masked_fill", f"{dt}.scalar", [rnd((3, 4), dt), rnd((3, 4), "Bool")],
             lambda v: v[0].masked_fill(v[1], 1 if v[0].dtype == torch.bool else 3), args={"value": 3.0 if dt != "Bool" else 1.0})
    case("masked_fill", "F32.neg_inf_bcast", [rnd((2, 3, 4), "F32"), rnd((3, 1), "Bool")],
         lambda v: v[0].masked_fill(v[1], float("-inf")), args={"value": float("-inf")})
    case("masked_fill", "F32.tensor_value", [rnd((3, 4), "F32"), rnd((3, 4), "Bool"), torch.tensor(2.5)],
         lambda v: v[0].masked_fill(v[1], v[2]))
    case("masked_fill", "F32.transposed", [Inp(rnd((4, 3), "F32"), T01), rnd((3, 4), "Bool")],
         lambda v: v[0].masked_fill(v[1], -1.0), args={"value": -1.0})
    case("masked_fill", "F32.dynamic", [Inp(rnd((5, 3), "F32"), sym={0: "seq"}), rnd((3,), "Bool")],
         lambda v: v[0].masked_fill(v[1], 0.5), args={"value": 0.5})


def gen_more_reductions():
    """Scans, order statistics, norms, normalisations, losses, creation and random numbers."""
    gen_axis_op("cumprod", lambda x, axis: torch.cumprod(x, dim=axis), kind="uniform_pm", int_dtypes=("I32", "I64"),
                tol_scale=3)
    case("cumprod", "F32.zero_inf_nan", [torch.tensor([[2.0, 0.0, float("inf"), 3.0], [-1.5, float("nan"), 2.0, 1.0]])],
         lambda v: torch.cumprod(v[0], dim=1), args={"axis": 1})
    case("cumprod", "Bool.axis-1", [rnd((3, 5), "Bool")], lambda v: torch.cumprod(v[0], dim=-1), args={"axis": -1})
    case("cumprod", "I64.large", [torch.tensor([[1000003, -1000033, 999983, 7]], dtype=torch.int64)],
         lambda v: torch.cumprod(v[0], dim=1), args={"axis": 1})
    for op, fn in (("cummax", torch.cummax), ("cummin", torch.cummin)):
        gen_axis_op(op, lambda x, axis, fn=fn: tuple(fn(x, dim=axis)), kind="distinct", int_dtypes=("I32", "I64", "U8"))
        case(op, "F32.ties_nan", [torch.tensor([[1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan"), 1.0],
                                                [-1.0, -1.0, 4.0, 4.0, float("-inf"), float("inf"), 0.0, -0.0]])],
             lambda v, fn=fn: tuple(fn(v[0], dim=1)), args={"axis": 1})
        case(op, "I32.ties", [torch.tensor([[2, 2, 1, 5, 5, 0]], dtype=torch.int32)], lambda v, fn=fn: tuple(fn(v[0], dim=1)),
             args={"axis": 1})
    gen_axis_op("logcumsumexp", lambda x, axis: torch.logcumsumexp(x, dim=axis), tol_scale=2.5)
    case("logcumsumexp", "F32.special", [torch.tensor([[float("-inf"), 1.0, float("inf"), 2.0],
                                                       [float("-inf"), float("-inf"), 1000.0, -1000.0],
                                                       [0.0, float("nan"), 1.0, 2.0]])],
         lambda v: torch.logcumsumexp(v[0], dim=1), args={"axis": 1})

    for op, fn in (("any", torch.any), ("all", torch.all)):
        def red(x, axes, keepdim, fn=fn):
            axes = sorted(a % x.dim() for a in (axes or range(x.dim())))
            for a in reversed(axes):
                x = fn(x, dim=a, keepdim=keepdim)
            return x
        for dt in ("Bool", "F32", "I32", "U8", "F16"):
            t = rnd((4, 6), dt)
            if dt != "Bool":
                t = t * (rnd((4, 6), "Bool") if dt != "F16" else rnd((4, 6), "Bool").to(TD[dt]))
            case(op, f"{dt}.axis1", [t], lambda v, red=red: red(v[0], [1], False), args={"axes": [1]})
        case(op, "Bool.all", [rnd((3, 4), "Bool")], lambda v, red=red: red(v[0], [], False), args={"axes": []})
        case(op, "Bool.all_true", [torch.ones((2, 3), dtype=torch.bool)], lambda v, red=red: red(v[0], [1], True),
             args={"axes": [1], "keepdim": True})
        case(op, "F32.special", [special("F32").reshape(2, 5)], lambda v, red=red: red(v[0], [1], False), args={"axes": [1]})
        case(op, "Bool.transposed", [Inp(rnd((5, 3), "Bool"), T01)], lambda v, red=red: red(v[0], [1], False),
             args={"axes": [1]})
        case(op, "Bool.dynamic", [Inp(rnd((3, 7), "Bool"), sym={1: "seq"})], lambda v, red=red: red(v[0], [1], False),
             args={"axes": [1]})

    import torch.linalg as LA
    for p in (2.0, 1.0, float("inf"), float("-inf"), 0.0, 3.0, 0.5):
        for dt in (FLOATS if p == 2.0 else ["F32"]):
            case("norm", f"{dt}.p{p}", [rnd((4, 6), dt)], lambda v, p=p: LA.vector_norm(v[0], ord=p, dim=[1]),
                 args={"p": p, "axes": [1]}, tol_scale=3)
    case("norm", "F32.all", [rnd((3, 4), "F32")], lambda v: LA.vector_norm(v[0]), args={}, tol_scale=4)
    case("norm", "F32.axes02_keepdim", [rnd((2, 3, 4), "F32")], lambda v: LA.vector_norm(v[0], dim=[0, 2], keepdim=True),
         args={"axes": [0, 2], "keepdim": True}, tol_scale=3)
    case("norm", "F32.transposed", [Inp(rnd((6, 4), "F32"), T01)], lambda v: LA.vector_norm(v[0], dim=[1]),
         args={"axes": [1]}, tol_scale=3)
    case("norm", "F32.dynamic", [Inp(rnd((3, 7), "F32"), sym={1: "seq"})], lambda v: LA.vector_norm(v[0], dim=[1]),
         args={"axes": [1]}, tol_scale=3)
    case("norm", "F32.special", [special("F32").reshape(2, 5)], lambda v: LA.vector_norm(v[0], dim=[1]),
         args={"axes": [1]})

    def med(x, axis, keepdim=False):
        return tuple(torch.median(x, dim=axis, keepdim=keepdim))
    for dt in FLOATS + ["I32", "I64"]:
        case("median", f"{dt}.axis-1", [rnd((4, 7), dt, "distinct")], lambda v: med(v[0], -1), args={"axis": -1})
    case("median", "F32.even_axis0_keepdim", [rnd((6, 3), "F32", "distinct")], lambda v: med(v[0], 0, True),
         args={"axis": 0, "keepdim": True})
    case("median", "F32.nan", [torch.tensor([[3.0, 1.0, float("nan"), 2.0], [4.0, 1.0, 2.0, 3.0],
                                             [float("nan"), 1.0, float("nan"), 0.0]])], lambda v: med(v[0], 1), args={"axis": 1})
    case("median", "F32.transposed", [Inp(rnd((5, 3), "F32", "distinct"), T01)], lambda v: med(v[0], 1), args={"axis": 1})
    case("median", "F32.dynamic", [Inp(rnd((2, 7), "F32", "distinct"), sym={1: "seq"})], lambda v: med(v[0], 1),
         args={"axis": 1})
    for k in (1, 3, 7):
        case("kthvalue", f"F32.k{k}", [rnd((3, 7), "F32", "distinct")],
             lambda v, k=k: tuple(torch.kthvalue(v[0], k, dim=-1)), args={"k": k})
    case("kthvalue", "I64.axis0_keepdim", [rnd((5, 3), "I64", "distinct")],
         lambda v: tuple(torch.kthvalue(v[0], 2, dim=0, keepdim=True)), args={"k": 2, "axis": 0, "keepdim": True})
    case("kthvalue", "F16.axis-1", [rnd((3, 6), "F16", "distinct")], lambda v: tuple(torch.kthvalue(v[0].float(), 4, dim=-1)) if False
         else tuple(torch.kthvalue(v[0], 4, dim=-1)), args={"k": 4})
    case("kthvalue", "F32.transposed", [Inp(rnd((5, 3), "F32", "distinct"), T01)],
         lambda v: tuple(torch.kthvalue(v[0], 2, dim=1)), args={"k": 2, "axis": 1})
    for q in (0.0, 0.3, 0.5, 0.75, 1.0):
        for interp in (("linear", "lower", "higher", "midpoint", "nearest") if q == 0.3 else ("linear",)):
            case("quantile", f"F32.q{q}_{interp}", [rnd((3, 6), "F32")],
                 lambda v, q=q, interp=interp: torch.quantile(v[0], q, dim=-1, interpolation=interp),
                 args={"q": q, "interpolation": interp})
    case("quantile", "F64.q0.4", [rnd((3, 6), "F64")], lambda v: torch.quantile(v[0], 0.4, dim=-1), args={"q": 0.4})
    for dt in ("F16", "BF16"):  # torch.quantile refuses half types: the reference is F32, rounded
        case("quantile", f"{dt}.q0.4", [rnd((3, 6), dt)], lambda v: torch.quantile(v[0].float(), 0.4, dim=-1).to(v[0].dtype),
             args={"q": 0.4}, upcast=False)
    case("quantile", "F32.nan_keepdim", [torch.tensor([[3.0, 1.0, float("nan"), 2.0], [4.0, 1.0, 2.0, 3.0]])],
         lambda v: torch.quantile(v[0], 0.5, dim=1, keepdim=True), args={"q": 0.5, "axis": 1, "keepdim": True})
    case("quantile", "F32.transposed_axis0", [Inp(rnd((5, 4), "F32"), T01)], lambda v: torch.quantile(v[0], 0.6, dim=0),
         args={"q": 0.6, "axis": 0})

    for dt in FLOATS:
        case("group_norm", f"{dt}.wb", [rnd((2, 6, 5), dt), rnd((6,), dt), rnd((6,), dt)],
             lambda v: F.group_norm(v[0], 3, v[1], v[2]), args={"groups": 3}, tol_scale=2)
    case("group_norm", "F32.4d_plain", [rnd((2, 4, 3, 3), "F32")], lambda v: F.group_norm(v[0], 2),
         args={"groups": 2}, tol_scale=2)
    case("group_norm", "F32.one_group_eps", [rnd((2, 4, 5), "F32"), rnd((4,), "F32"), rnd((4,), "F32")],
         lambda v: F.group_norm(v[0], 1, v[1], v[2], eps=1e-3), args={"groups": 1, "eps": 1e-3}, tol_scale=2)
    case("group_norm", "F32.transposed", [Inp(rnd((2, 5, 4), "F32"), {"kind": "transpose", "dims": [1, 2]})],
         lambda v: F.group_norm(v[0], 2), args={"groups": 2}, tol_scale=2)
    case("group_norm", "F32.dynamic", [Inp(rnd((2, 4, 6), "F32"), sym={2: "seq"})], lambda v: F.group_norm(v[0], 4),
         args={"groups": 4}, tol_scale=2)
    for dt in FLOATS:
        case("batch_norm", f"{dt}.running", [rnd((3, 4, 5), dt), rnd((4,), dt), rnd((4,), dt, "pos"), rnd((4,), dt),
                                             rnd((4,), dt)],
             lambda v: F.batch_norm(v[0], v[1], v[2], v[3], v[4], training=False), args={}, tol_scale=2)
    case("batch_norm", "F32.batch_stats", [rnd((4, 3, 5), "F32"), rnd((3,), "F32"), rnd((3,), "F32")],
         lambda v: F.batch_norm(v[0], None, None, v[1], v[2], training=True), args={"running": False}, tol_scale=3)
    case("batch_norm", "F32.2d_running_plain", [rnd((5, 3), "F32"), rnd((3,), "F32"), rnd((3,), "F32", "pos")],
         lambda v: F.batch_norm(v[0], v[1], v[2], training=False, eps=1e-3), args={"eps": 1e-3}, tol_scale=2)
    case("batch_norm", "F32.4d_dynamic", [Inp(rnd((2, 3, 4, 5), "F32"), sym={3: "w"}), rnd((3,), "F32"),
                                          rnd((3,), "F32", "pos")],
         lambda v: F.batch_norm(v[0], v[1], v[2], training=False), args={}, tol_scale=2)
    for dt in FLOATS:
        case("normalize", f"{dt}.axis1", [rnd((3, 5), dt)], lambda v: F.normalize(v[0], dim=1), args={"axis": 1},
             tol_scale=2)
    case("normalize", "F32.p1_axis0", [rnd((4, 3), "F32")], lambda v: F.normalize(v[0], p=1.0, dim=0),
         args={"p": 1.0, "axis": 0}, tol_scale=2)
    case("normalize", "F32.zero_row", [torch.tensor([[0.0, 0.0, 0.0], [1.0, -2.0, 2.0]])], lambda v: F.normalize(v[0], dim=1),
         args={"axis": 1})
    case("normalize", "F32.transposed", [Inp(rnd((5, 3), "F32"), T01)], lambda v: F.normalize(v[0], dim=-1),
         args={"axis": -1}, tol_scale=2)

    def ce(v, **kw):
        return F.cross_entropy(v[0], v[1], v[2] if len(v) > 2 else None, **kw)
    tgt = torch.tensor([1, 0, 4, 4, 2, 3], dtype=torch.int64)
    for dt in FLOATS:
        case("cross_entropy", f"{dt}.mean", [rnd((6, 5), dt), tgt], lambda v: ce(v), tol_scale=3)
    for red in ("sum", "none"):
        case("cross_entropy", f"F32.{red}", [rnd((6, 5), "F32"), tgt], lambda v, red=red: ce(v, reduction=red),
             args={"reduction": red}, tol_scale=3)
    ign = torch.tensor([1, -100, 4, 4, -100, 3], dtype=torch.int64)
    case("cross_entropy", "F32.ignore_weight", [rnd((6, 5), "F32"), ign, rnd((5,), "F32", "pos")], lambda v: ce(v),
         tol_scale=3)
    # luminal takes any integer target (torch wants int64).
    case("cross_entropy", "F32.ignore_index4_I32", [rnd((6, 5), "F32"), tgt.to(torch.int32)],
         lambda v: ce([v[0], v[1].long()], ignore_index=4), args={"ignore_index": 4}, tol_scale=3)
    for red in ("mean", "sum", "none"):
        case("cross_entropy", f"F32.smooth_weight_{red}", [rnd((6, 5), "F32"), ign, rnd((5,), "F32", "pos")],
             lambda v, red=red: ce(v, reduction=red, label_smoothing=0.2), args={"reduction": red, "label_smoothing": 0.2},
             tol_scale=3)
    case("cross_entropy", "F32.smooth_mean", [rnd((6, 5), "F32"), ign], lambda v: ce(v, label_smoothing=0.1),
         args={"label_smoothing": 0.1}, tol_scale=3)
    case("cross_entropy", "F32.spatial", [rnd((2, 4, 3, 2), "F32"), torch.randint(0, 4, (2, 3, 2), generator=GEN)],
         lambda v: ce(v), tol_scale=3)
    case("cross_entropy", "F32.unbatched", [rnd((5,), "F32"), torch.tensor(3)], lambda v: ce(v), tol_scale=2)
    case("cross_entropy", "F32.probabilities", [rnd((4, 5), "F32"), torch.softmax(rnd((4, 5), "F32"), dim=1)],
         lambda v: ce(v), tol_scale=3)
    case("cross_entropy", "F32.probabilities_smooth_none", [rnd((4, 5), "F32"), torch.softmax(rnd((4, 5), "F32"), dim=1)],
         lambda v: ce(v, label_smoothing=0.3, reduction="none"), args={"label_smoothing": 0.3, "reduction": "none"},
         tol_scale=3)
    case("cross_entropy", "F32.transposed", [Inp(rnd((5, 6), "F32"), T01), tgt], lambda v: ce(v), tol_scale=3)
    case("cross_entropy", "F32.large_logits", [torch.tensor([[1000.0, -1000.0, 0.0], [float("-inf"), 1.0, 2.0]]),
                                               torch.tensor([0, 2])], lambda v: ce(v, reduction="none"),
         args={"reduction": "none"})

    # dropout: identity at inference; while training, about p of the elements are zeroed and
    # the rest scaled by 1 / (1 - p) (compared as statistics: torch's generator differs).
    for dt in ("F32", "F16", "I32"):
        case("dropout", f"{dt}.eval", [rnd((3, 4), dt)], lambda v: F.dropout(v[0].float() if v[0].dtype == torch.int32
                                                                            else v[0], 0.5, training=False).to(v[0].dtype),
             args={"p": 0.5})
    case("dropout_stats", "F32.p0.3", [rnd((256, 256), "F32", "pos")],
         lambda v: torch.tensor([0.3, 0.0], dtype=torch.float64), args={"p": 0.3, "seed": 7}, upcast=False, tol_scale=1e7)
    # rand/randn: [mean, var, lag-1 correlation, same seed equal, seed + 1 equal] of 65536
    # samples against their expected values (atol 0.01 / 0.05: several standard errors),
    # and [min in range, max in range], in each float dtype.
    for dt in FLOATS:
        for normal in (False, True):
            expect = [0.0, 1.0, 0.0, 1.0, 0.0] if normal else [0.5, 1 / 12, 0.0, 1.0, 0.0]
            case("randn" if normal else "rand", f"{dt}.stats", [],
                 lambda v, e=expect: (torch.tensor(e, dtype=torch.float64), torch.ones(2, dtype=torch.float64)),
                 args={"shape": [256, 256], "seed": 1234, "dtype": dt, "normal": normal}, runner_op="rand_stats",
                 upcast=False, tol_scale=5e7 if normal else 1e7)
    case("rand", "F32.seed0", [], lambda v: (torch.tensor([0.5, 1 / 12, 0.0, 1.0, 0.0], dtype=torch.float64),
                                             torch.ones(2, dtype=torch.float64)),
         args={"shape": [128, 512], "seed": 0, "dtype": "F32"}, runner_op="rand_stats", upcast=False, tol_scale=1e7)
    # The counter-offset overload (luminal.torch feeds a fresh offset per call): same stats,
    # and the next call's offset (2^32 on) draws different numbers.
    for normal, dt in ((False, "F32"), (True, "F64"), (False, "BF16")):
        expect = [0.0, 1.0, 0.0, 1.0, 0.0] if normal else [0.5, 1 / 12, 0.0, 1.0, 0.0]
        case("randn" if normal else "rand", f"{dt}.offset_stats", [],
             lambda v, e=expect: (torch.tensor(e, dtype=torch.float64), torch.ones(2, dtype=torch.float64)),
             args={"shape": [256, 256], "seed": 7, "dtype": dt, "normal": normal, "offset": 3 * 2.0 ** 32},
             runner_op="rand_stats", upcast=False, tol_scale=5e7 if normal else 1e7)

    for dt in ALL:
        case("full", f"{dt}.2d", [], lambda v, dt=dt: torch.full((3, 4), 1 if dt == "Bool" else 3, dtype=TD[dt]),
             args={"shape": [3, 4], "value": 1 if dt == "Bool" else 3, "dtype": dt})
    case("full", "F32.neg_inf", [], lambda v: torch.full((2, 3), float("-inf")), args={"shape": [2, 3], "value": "-inf",
                                                                                         "dtype": "F32"})
    for op in ("zeros", "ones"):
        for dt in ("F32", "I64", "Bool", "BF16"):
            case(op, f"{dt}.3d", [], lambda v, op=op, dt=dt: getattr(torch, op)((2, 3, 4), dtype=TD[dt]),
                 args={"shape": [2, 3, 4], "dtype": dt})
    for dt in ("F32", "I64", "Bool", "F16"):
        case("eye", f"{dt}.square", [], lambda v, dt=dt: torch.eye(4, dtype=TD[dt]), args={"n": 4, "dtype": dt})
    case("eye", "F32.rect", [], lambda v: torch.eye(3, 5), args={"n": 3, "m": 5, "dtype": "F32"})
    case("eye", "F32.rect_tall", [], lambda v: torch.eye(5, 2), args={"n": 5, "m": 2, "dtype": "F32"})
    for tag, (a, b, n) in {"basic": (0.0, 1.0, 5), "neg": (-3.0, 7.5, 11), "down": (10.0, -2.0, 7), "one": (2.5, 9.0, 1),
                           "even": (-1.0, 1.0, 8), "big": (0.0, 1e6, 13)}.items():
        for dt in ("F32", "F64", "F16") if tag == "neg" else ("F32",):
            case("linspace", f"{dt}.{tag}", [], lambda v, a=a, b=b, n=n, dt=dt: torch.linspace(a, b, n, dtype=TD[dt]),
                 args={"start": a, "end": b, "steps": n, "dtype": dt}, upcast=False)
    case("linspace", "I64.trunc", [], lambda v: torch.linspace(-3.0, 4.0, 6, dtype=torch.int64),
         args={"start": -3.0, "end": 4.0, "steps": 6, "dtype": "I64"})


def gen_more_movement():
    for dt in ("F32", "I64", "Bool"):
        case("roll", f"{dt}.axis1", [rnd((3, 5), dt)], lambda v: torch.roll(v[0], 2, 1), args={"shifts": [2], "axes": [1]})
    case("roll", "F32.negative_two_axes", [rnd((3, 4, 5), "F32")], lambda v: torch.roll(v[0], (-1, 7), (0, 2)),
         args={"shifts": [-1, 7], "axes": [0, 2]})
    case("roll", "F32.flat", [rnd((3, 4), "F32")], lambda v: torch.roll(v[0], 5), args={"shifts": [5]})
    case("roll", "F32.transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v: torch.roll(v[0], 1, 1),
         args={"shifts": [1], "axes": [1]})
    case("roll", "F32.dynamic", [Inp(rnd((6, 2), "F32"), sym={0: "seq"})], lambda v: torch.roll(v[0], -2, 0),
         args={"shifts": [-2], "axes": [0]})
    for src, dst in (([0], [2]), ([2], [0]), ([0, 1], [2, 0]), ([-1], [1])):
        case("movedim", f"F32.{src}_{dst}".replace(" ", ""), [rnd((2, 3, 4), "F32")],
             lambda v, src=src, dst=dst: torch.movedim(v[0], src, dst), args={"source": src, "destination": dst})
    case("movedim", "I32.transposed", [Inp(rnd((3, 2, 4), "I32"), T01)], lambda v: torch.movedim(v[0], 0, -1),
         args={"source": [0], "destination": [-1]})
    for dt in ("F32", "I32", "Bool"):
        case("unbind", f"{dt}.axis0", [rnd((3, 4), dt)], lambda v: v[0].unbind(0), args={"axis": 0})
    case("unbind", "F32.axis-1_transposed", [Inp(rnd((4, 3), "F32"), T01)], lambda v: v[0].unbind(-1), args={"axis": -1})
    case("unbind", "F32.dynamic_other", [Inp(rnd((5, 2), "F32"), sym={0: "seq"})], lambda v: v[0].unbind(1),
         args={"axis": 1})
    for dt in ("F32", "I64", "Bool", "F16"):
        case("repeat_interleave", f"{dt}.axis1", [rnd((2, 3), dt)], lambda v: v[0].repeat_interleave(3, dim=1),
             args={"repeats": 3, "axis": 1})
    case("repeat_interleave", "F32.flat", [rnd((2, 3), "F32")], lambda v: v[0].repeat_interleave(2), args={"repeats": 2})
    case("repeat_interleave", "F32.transposed_axis0", [Inp(rnd((3, 2), "F32"), T01)],
         lambda v: v[0].repeat_interleave(2, dim=0), args={"repeats": 2, "axis": 0})
    case("repeat_interleave", "F32.dynamic", [Inp(rnd((4, 2), "F32"), sym={0: "seq"})],
         lambda v: v[0].repeat_interleave(3, dim=0), args={"repeats": 3, "axis": 0})
    for tag, (axis, size, step) in {"basic": (1, 3, 1), "step2": (1, 2, 2), "axis0_step3": (0, 2, 3), "whole": (1, 7, 1)}.items():
        case("unfold", f"F32.{tag}", [rnd((5, 7), "F32")], lambda v, a=axis, n=size, s=step: v[0].unfold(a, n, s),
             args={"axis": axis, "size": size, "step": step})
    case("unfold", "I32.transposed", [Inp(rnd((6, 4), "I32"), T01)], lambda v: v[0].unfold(1, 3, 2),
         args={"axis": 1, "size": 3, "step": 2})
    case("unfold", "F32.dynamic", [Inp(rnd((2, 9), "F32"), sym={1: "seq"})], lambda v: v[0].unfold(1, 4, 2),
         args={"axis": 1, "size": 4, "step": 2})
    for dt in ("F32", "I32"):
        case("pixel_shuffle", f"{dt}.r2", [rnd((2, 8, 3, 2), dt)], lambda v: F.pixel_shuffle(v[0], 2), args={"r": 2})
        case("pixel_unshuffle", f"{dt}.r2", [rnd((2, 2, 4, 6), dt)], lambda v: F.pixel_unshuffle(v[0], 2), args={"r": 2})
    case("pixel_shuffle", "F32.r3_unbatched", [rnd((9, 2, 3), "F32")], lambda v: F.pixel_shuffle(v[0], 3), args={"r": 3})
    case("pixel_shuffle", "F32.transposed", [Inp(rnd((1, 4, 3, 2), "F32"), {"kind": "transpose", "dims": [2, 3]})],
         lambda v: F.pixel_shuffle(v[0], 2), args={"r": 2})
    case("pixel_unshuffle", "F32.r3", [rnd((1, 1, 6, 9), "F32")], lambda v: F.pixel_unshuffle(v[0], 3), args={"r": 3})


def gen_more_nn():
    """Convolutions, pooling, resizing, linear algebra and accumulating index ops."""
    def conv3(v, a):
        return F.conv3d(v[0], v[1], v[2] if len(v) > 2 else None, stride=a.get("stride", 1), padding=a.get("padding", 0),
                        dilation=a.get("dilation", 1), groups=a.get("groups", 1))
    for dt in FLOATS:
        case("conv3d", f"{dt}.basic", [rnd((1, 2, 4, 5, 4), dt), rnd((3, 2, 2, 3, 2), dt), rnd((3,), dt)],
             lambda v: conv3(v, {}), tol_scale=6)
    for tag, a in (("stride_pad", {"stride": [2, 1, 2], "padding": [1, 0, 1]}), ("dilation_groups", {"dilation": 2, "groups": 2})):
        case("conv3d", f"F32.{tag}", [rnd((2, 4, 5, 6, 5), "F32"), rnd((2, 4 // a.get("groups", 1), 2, 2, 2), "F32")],
             lambda v, a=a: conv3(v, a), args=a, tol_scale=6)
    case("conv3d", "F32.unbatched_transposed", [Inp(rnd((2, 4, 3, 5), "F32"), {"kind": "transpose", "dims": [1, 3]}),
                                                rnd((2, 2, 2, 2, 2), "F32")], lambda v: conv3(v, {}), tol_scale=5)

    def convt(v, a):
        fn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[v[1].dim()]
        return fn(v[0], v[1], v[2] if len(v) > 2 else None, stride=a.get("stride", 1), padding=a.get("padding", 0),
                  output_padding=a.get("output_padding", 0), groups=a.get("groups", 1), dilation=a.get("dilation", 1))
    for dt in FLOATS:
        case("conv_transpose", f"{dt}.1d_stride2", [rnd((2, 3, 5), dt), rnd((3, 4, 3), dt), rnd((4,), dt)],
             lambda v: convt(v, {"stride": 2}), args={"stride": 2}, tol_scale=4)
    for tag, a, xs, ws in (("1d_all", {"stride": 3, "padding": 2, "output_padding": 1, "dilation": 2, "groups": 2},
                            (1, 4, 6), (4, 3, 3)),
                           ("2d_stride_pad", {"stride": [2, 1], "padding": [1, 0], "output_padding": [1, 0]},
                            (2, 3, 4, 5), (3, 2, 3, 3)),
                           ("2d_big_padding", {"padding": 2}, (1, 2, 5, 5), (2, 3, 2, 2)),
                           ("2d_groups", {"groups": 3, "stride": 2}, (1, 3, 3, 4), (3, 2, 3, 2)),
                           ("3d", {"stride": 2, "padding": 1}, (1, 2, 3, 3, 2), (2, 2, 2, 3, 2))):
        case("conv_transpose", f"F32.{tag}", [rnd(xs, "F32"), rnd(ws, "F32")], lambda v, a=a: convt(v, a), args=a,
             tol_scale=4)
    case("conv_transpose", "F32.2d_unbatched_dynamic", [Inp(rnd((2, 4, 5), "F32"), sym={2: "w"}), rnd((2, 3, 3, 3), "F32"),
                                                        rnd((3,), "F32")],
         lambda v: convt(v, {"stride": 2}), args={"stride": 2}, tol_scale=4)

    pools = {1: (F.max_pool1d, F.avg_pool1d), 2: (F.max_pool2d, F.avg_pool2d), 3: (F.max_pool3d, F.avg_pool3d)}
    for nd, shape in ((1, (2, 3, 11)), (2, (1, 2, 7, 9)), (3, (1, 2, 5, 6, 7))):
        mx, av = pools[nd]
        for tag, a in (("k3", {"kernel": [3]}), ("k3_s2_p1", {"kernel": [3], "stride": [2], "padding": [1]}),
                       ("k2_s2_ceil", {"kernel": [2], "stride": [2], "ceil_mode": True}),
                       ("k3_s2_p1_ceil", {"kernel": [3], "stride": [2], "padding": [1], "ceil_mode": True})):
            k, st, pd = a["kernel"][0], a.get("stride", [None])[0], a.get("padding", [0])[0]
            a = {key: (val * nd if isinstance(val, list) else val) for key, val in a.items()}  # one size per dim
            ceil = a.get("ceil_mode", False)
            case("max_pool", f"F32.{nd}d_{tag}", [rnd(shape, "F32")],
                 lambda v, k=k, st=st, pd=pd, ceil=ceil, mx=mx: mx(v[0], k, st, pd, ceil_mode=ceil), args=a)
            case("avg_pool", f"F32.{nd}d_{tag}", [rnd(shape, "F32")],
                 lambda v, k=k, st=st, pd=pd, ceil=ceil, av=av: av(v[0], k, st, pd, ceil_mode=ceil), args=a)
            if pd:
                case("avg_pool", f"F32.{nd}d_{tag}_exclude_pad", [rnd(shape, "F32")],
                     lambda v, k=k, st=st, pd=pd, ceil=ceil, av=av: av(v[0], k, st, pd, ceil_mode=ceil,
                                                                      count_include_pad=False),
                     args={**a, "count_include_pad": False})
    case("max_pool", "F32.2d_dilation2", [rnd((1, 2, 7, 8), "F32")], lambda v: F.max_pool2d(v[0], 2, 1, 0, dilation=2),
         args={"kernel": [2, 2], "stride": [1], "dilation": [2]})
    for dt in ("F16", "BF16", "F64", "I32"):
        case("max_pool", f"{dt}.2d_k2", [rnd((1, 2, 4, 6), dt)],
             lambda v: F.max_pool2d(v[0].float(), 2).to(v[0].dtype) if v[0].dtype == torch.int32 else F.max_pool2d(v[0], 2),
             args={"kernel": [2, 2]})
    for dt in ("F16", "BF16", "F64"):
        case("avg_pool", f"{dt}.1d_k3", [rnd((2, 2, 9), dt)], lambda v: F.avg_pool1d(v[0], 3), args={"kernel": [3]})
    case("max_pool", "F32.1d_nan_dynamic", [Inp(torch.tensor([[[1.0, float("nan"), 3.0, -2.0, 5.0, 0.5]]]), sym={2: "L"})],
         lambda v: F.max_pool1d(v[0], 2), args={"kernel": [2]})
    for dt in ("F32", "F16"):
        case("max_pool1d", f"{dt}.k3_s2_p1", [rnd((2, 3, 10), dt)], lambda v: F.max_pool1d(v[0], 3, 2, 1),
             args={"kernel": 3, "stride": 2, "padding": 1})
        case("avg_pool1d", f"{dt}.k3_s2_p1", [rnd((2, 3, 10), dt)], lambda v: F.avg_pool1d(v[0], 3, 2, 1),
             args={"kernel": 3, "stride": 2, "padding": 1})
    case("max_pool1d", "F32.transposed_unbatched", [Inp(rnd((7, 3), "F32"), T01)], lambda v: F.max_pool1d(v[0], 2),
         args={"kernel": 2})
    case("avg_pool1d", "F32.dynamic", [Inp(rnd((1, 2, 9), "F32"), sym={2: "L"})], lambda v: F.avg_pool1d(v[0], 3),
         args={"kernel": 3})

    adapt = {1: (F.adaptive_avg_pool1d, F.adaptive_max_pool1d), 2: (F.adaptive_avg_pool2d, F.adaptive_max_pool2d),
             3: (F.adaptive_avg_pool3d, F.adaptive_max_pool3d)}
    for shape, size in (((2, 3, 10), [4]), ((2, 3, 7), [3]), ((1, 2, 7, 9), [3, 4]), ((1, 2, 5, 6), [5, 2]),
                        ((2, 6, 6), [2, 3]), ((1, 2, 4, 5, 6), [2, 3, 4]), ((1, 2, 3, 4), [6, 7])):
        avg, mx = adapt[len(size)]
        tag = "x".join(map(str, shape)) + "_to_" + "x".join(map(str, size))
        case("adaptive_avg_pool", f"F32.{tag}", [rnd(shape, "F32")], lambda v, f=avg, s=size: f(v[0], s), args={"size": size})
        case("adaptive_max_pool", f"F32.{tag}", [rnd(shape, "F32")], lambda v, f=mx, s=size: f(v[0], s), args={"size": size})
    for dt in ("F16", "BF16", "F64"):
        case("adaptive_avg_pool", f"{dt}.2d", [rnd((1, 2, 5, 7), dt)], lambda v: F.adaptive_avg_pool2d(v[0], [2, 3]),
             args={"size": [2, 3]})
    case("adaptive_max_pool", "I32.2d", [rnd((1, 2, 5, 7), "I32")],
         lambda v: F.adaptive_max_pool2d(v[0].float(), [2, 3])[0].to(torch.int32) if False
         else F.adaptive_max_pool2d(v[0].double(), [2, 3]).to(torch.int32), args={"size": [2, 3]})
    case("adaptive_avg_pool", "F32.transposed", [Inp(rnd((1, 2, 6, 5), "F32"), {"kind": "transpose", "dims": [2, 3]})],
         lambda v: F.adaptive_avg_pool2d(v[0], [2, 4]), args={"size": [2, 4]})

    def interp(v, size, mode, ac=None):
        return F.interpolate(v[0], size=size, mode=mode, align_corners=ac)
    for shape, size, mode, ac in (((1, 2, 5), [11], "nearest", None), ((1, 2, 6), [4], "nearest", None),
                                  ((1, 2, 10), [6], "nearest", None), ((1, 2, 4, 5), [8, 10], "nearest", None),
                                  ((1, 2, 4, 5), [7, 3], "nearest", None), ((1, 2, 4, 5), [7, 3], "nearest-exact", None),
                                  ((1, 2, 5), [9], "linear", False), ((1, 2, 5), [9], "linear", True),
                                  ((1, 2, 4, 5), [7, 8], "bilinear", False), ((1, 2, 4, 5), [7, 8], "bilinear", True),
                                  ((1, 2, 6, 6), [3, 4], "bilinear", False), ((2, 1, 4, 5), [1, 1], "bilinear", True),
                                  ((1, 2, 3, 4, 5), [5, 3, 7], "trilinear", False), ((1, 2, 3, 4, 5), [5, 3, 7], "nearest", None),
                                  ((1, 2, 6, 8), [4, 3], "area", None)):
        tag = f"{mode}_{'x'.join(map(str, shape))}_to_{'x'.join(map(str, size))}" + ("_ac" if ac else "")
        args = {"size": size, "mode": mode}
        if ac:
            args["align_corners"] = True
        case("interpolate", f"F32.{tag}", [rnd(shape, "F32")], lambda v, s=size, m=mode, ac=ac: interp(v, s, m, ac),
             args=args, tol_scale=2)
    for dt in ("F16", "BF16", "F64"):
        case("interpolate", f"{dt}.bilinear", [rnd((1, 2, 4, 5), dt)], lambda v: interp(v, [7, 8], "bilinear", False),
             args={"size": [7, 8], "mode": "bilinear"}, tol_scale=2)
        case("interpolate", f"{dt}.nearest", [rnd((1, 2, 4, 5), dt)], lambda v: interp(v, [7, 8], "nearest"),
             args={"size": [7, 8], "mode": "nearest"})
    case("interpolate", "I64.nearest", [rnd((1, 1, 3, 4), "I64")],
         lambda v: F.interpolate(v[0].double(), size=[5, 8], mode="nearest").to(torch.int64),
         args={"size": [5, 8], "mode": "nearest"})
    case("interpolate", "F32.bilinear_transposed", [Inp(rnd((1, 2, 5, 4), "F32"), {"kind": "transpose", "dims": [2, 3]})],
         lambda v: interp(v, [6, 9], "bilinear", False), args={"size": [6, 9], "mode": "bilinear"}, tol_scale=2)
    case("interpolate", "F32.bilinear_special", [torch.tensor([[[[1.0, float("inf")], [float("nan"), -2.0]]]])],
         lambda v: interp(v, [3, 3], "bilinear", True), args={"size": [3, 3], "mode": "bilinear", "align_corners": True})

    def unf(v, a):
        return F.unfold(v[0], a["kernel"], dilation=a.get("dilation", 1), padding=a.get("padding", 0), stride=a.get("stride", 1))
    for tag, a in (("k2", {"kernel": [2, 2]}), ("k3_p1_s2", {"kernel": [3, 3], "padding": [1, 1], "stride": [2, 2]}),
                   ("k2x3_d2", {"kernel": [2, 3], "dilation": [2, 1]})):
        case("im2col", f"F32.{tag}", [rnd((2, 3, 6, 7), "F32")], lambda v, a=a: unf(v, a), args=a)
    case("im2col", "I32.unbatched", [rnd((2, 4, 5), "I32")], lambda v: F.unfold(v[0].double(), 2).to(torch.int32)
         if False else F.unfold(v[0].unsqueeze(0).double(), 2).squeeze(0).to(torch.int32), args={"kernel": [2, 2]})
    case("im2col", "F32.dynamic", [Inp(rnd((1, 2, 5, 6), "F32"), sym={3: "w"})], lambda v: unf(v, {"kernel": [2, 2]}),
         args={"kernel": [2, 2]})

    # ---- linear algebra ----
    for dt in ("F32", "I64", "F16"):
        case("outer", f"{dt}.basic", [rnd((4,), dt), rnd((3,), dt)], lambda v: torch.outer(v[0], v[1]))
    case("outer", "I32xF32.mixed", [rnd((4,), "I32"), rnd((3,), "F32")], lambda v: torch.outer(v[0], v[1]))
    case("outer", "F32.dynamic_sliced", [Inp(rnd((7,), "F32"), sym={0: "n"}), Inp(rnd((8,), "F32"), sl(0, 1, 8, 2))],
         lambda v: torch.outer(v[0], v[1]))
    for k in (0, 1, -2):
        case("diag", f"F32.vec_k{k}", [rnd((4,), "F32")], lambda v, k=k: torch.diag(v[0], k), args={"offset": k})
        case("diag", f"I64.mat_k{k}", [rnd((4, 5), "I64")], lambda v, k=k: torch.diag(v[0], k), args={"offset": k})
    case("diag", "F32.special_vec", [special("F32")[:4]], lambda v: torch.diag(v[0]))
    case("diag", "F32.transposed", [Inp(rnd((5, 3), "F32"), T01)], lambda v: torch.diag(v[0], 1), args={"offset": 1})
    for tag, (k, a1, a2) in {"basic": (0, 0, 1), "offset": (1, 1, 2), "neg_swapped": (-1, 2, 0)}.items():
        case("diagonal", f"F32.{tag}", [rnd((3, 4, 5), "F32")],
             lambda v, k=k, a1=a1, a2=a2: torch.diagonal(v[0], k, a1, a2), args={"offset": k, "axis1": a1, "axis2": a2})
    case("diagonal", "F32.dynamic", [Inp(rnd((5, 4), "F32"), sym={0: "rows"})], lambda v: torch.diagonal(v[0]), args={})
    for dt in ("F32", "I32", "F64"):
        case("trace", f"{dt}.rect", [rnd((4, 6), dt)], lambda v: torch.trace(v[0]))
    case("trace", "F32.transposed", [Inp(rnd((3, 3), "F32"), T01)], lambda v: torch.trace(v[0]))
    for tag, eq, shapes in (("matmul", "ij,jk->ik", [(3, 4), (4, 5)]), ("batched", "bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
                            ("transpose", "ij->ji", [(3, 4)]), ("sum_all", "ij->", [(3, 4)]),
                            ("diag", "ii->i", [(4, 4)]), ("trace", "ii", [(4, 4)]), ("outer", "i,j->ij", [(3,), (4,)]),
                            ("dot", "i,i", [(5,), (5,)]), ("implicit", "ij,jk", [(2, 3), (3, 4)]),
                            ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
                            ("ellipsis", "...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
                            ("ellipsis_implicit", "b...,b...", [(2, 3, 4), (2, 3, 4)]),
                            ("attention", "bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
                            ("repeated_three", "iij,jk->ik", [(3, 3, 4), (4, 2)])):
        case("einsum", f"F32.{tag}", [rnd(s, "F32") for s in shapes], lambda v, eq=eq: torch.einsum(eq, *v),
             args={"equation": eq}, tol_scale=3)
    case("einsum", "I64.matmul", [rnd((3, 4), "I64"), rnd((4, 2), "I64")], lambda v: torch.einsum("ij,jk->ik", *v),
         args={"equation": "ij,jk->ik"})
    case("einsum", "F16.matmul", [rnd((3, 4), "F16"), rnd((4, 2), "F16")], lambda v: torch.einsum("ij,jk->ik", *v),
         args={"equation": "ij,jk->ik"}, tol_scale=3)
    case("einsum", "F32.transposed_dynamic", [Inp(rnd((4, 3), "F32"), T01), Inp(rnd((4, 5), "F32"), sym={1: "n"})],
         lambda v: torch.einsum("ij,jk->ki", *v), args={"equation": "ij,jk->ki"}, tol_scale=3)

    # ---- accumulating index ops: duplicate indices add up ----
    for dt in ("F32", "I64", "F16", "I32"):
        case("scatter_add", f"{dt}.axis0_dups", [rnd((3, 4), dt), torch.tensor([[0, 1, 2, 0], [2, 2, 0, 1], [0, 0, 0, 0]]),
                                                 rnd((3, 4), dt)],
             lambda v: v[0].scatter_add(0, v[1], v[2]), args={"axis": 0}, tol_scale=3)
    case("scatter_add", "F32.axis1_small_index", [rnd((3, 5), "F32"), torch.tensor([[4, 4, 0], [1, 3, 1]]), rnd((2, 4), "F32")],
         lambda v: v[0].scatter_add(1, v[1], v[2]), args={"axis": 1}, tol_scale=3)
    case("scatter_add", "F32.special_untouched", [torch.tensor([[-0.0, float("inf"), 1.0], [float("nan"), -0.0, 2.0]]),
                                                  torch.tensor([[2, 2]]), torch.tensor([[float("inf"), 1.5]])],
         lambda v: v[0].scatter_add(1, v[1], v[2]), args={"axis": 1})
    case("scatter_add", "F32.transposed_3d", [Inp(rnd((4, 3, 2), "F32"), T01), torch.randint(0, 3, (2, 4, 2), generator=GEN),
                                              rnd((2, 4, 2), "F32")],
         lambda v: v[0].scatter_add(0, v[1], v[2]), args={"axis": 0}, tol_scale=3)
    case("scatter_add", "F32.dynamic", [Inp(rnd((3, 6), "F32"), sym={1: "n"}), torch.tensor([[0, 1], [2, 2], [1, 1]]),
                                        rnd((3, 2), "F32")],
         lambda v: v[0].scatter_add(0, v[1], v[2]), args={"axis": 0}, tol_scale=3)
    for dt in ("F32", "I64"):
        case("index_add", f"{dt}.axis0_dups", [rnd((4, 3), dt), torch.tensor([0, 3, 0, 2, 0]), rnd((5, 3), dt)],
             lambda v: v[0].index_add(0, v[1], v[2]), args={"axis": 0}, tol_scale=3)
    case("index_add", "F32.axis1_alpha", [rnd((2, 5), "F32"), torch.tensor([4, 1, 4], dtype=torch.int32), rnd((2, 3), "F32")],
         lambda v: v[0].index_add(1, v[1], v[2], alpha=-2.0), args={"axis": 1, "alpha": -2.0}, tol_scale=3)
    for acc in (False, True):
        tag = "accumulate" if acc else "assign"
        case("index_put", f"F32.2idx_{tag}", [rnd((4, 5), "F32"), torch.tensor([0, 3, -1]), torch.tensor([1, 4, 2]),
                                              rnd((3,), "F32")],
             lambda v, acc=acc: v[0].index_put((v[1], v[2]), v[3], accumulate=acc), args={"accumulate": acc})
        case("index_put", f"F32.rows_{tag}", [rnd((4, 3), "F32"), torch.tensor([2, 0]), rnd((2, 3), "F32")],
             lambda v, acc=acc: v[0].index_put((v[1],), v[2], accumulate=acc), args={"accumulate": acc})
        case("index_put", f"I64.bcast_value_{tag}", [rnd((3, 4), "I64"), torch.tensor([[0], [2]]), torch.tensor([1, 3]),
                                                     torch.tensor(7)],
             lambda v, acc=acc: v[0].index_put((v[1], v[2]), v[3], accumulate=acc), args={"accumulate": acc})
    case("index_put", "F32.dups_accumulate", [rnd((4,), "F32"), torch.tensor([1, 1, 3, 1]), rnd((4,), "F32")],
         lambda v: v[0].index_put((v[1],), v[2], accumulate=True), args={"accumulate": True}, tol_scale=2)

    # col2im (F.fold): overlapping blocks sum. Input (N, C*kh*kw, L) with L the block count.
    # Last, so the cases before keep their random data.
    def fold(v, a):
        return F.fold(v[0], a["output_size"], a["kernel"], dilation=a.get("dilation", 1), padding=a.get("padding", 0),
                      stride=a.get("stride", 1))

    def fold_blocks(a):
        return F.unfold(torch.zeros(1, 1, *a["output_size"]), a["kernel"], dilation=a.get("dilation", 1),
                        padding=a.get("padding", 0), stride=a.get("stride", 1)).shape[-1]
    folds = {"k2": {"output_size": [5, 6], "kernel": [2, 2]},
             "k3_p1_s2": {"output_size": [6, 7], "kernel": [3, 3], "padding": [1, 1], "stride": [2, 2]},
             "k2x3_d2": {"output_size": [6, 7], "kernel": [2, 3], "dilation": [2, 1]},
             "k3x2_mixed": {"output_size": [7, 8], "kernel": [3, 2], "dilation": [1, 2], "padding": [1, 0],
                            "stride": [2, 1]},
             "k1_s3_gaps": {"output_size": [7, 5], "kernel": [1, 1], "stride": [3, 2]}}  # never-covered pixels
    for tag, a in folds.items():
        k = a["kernel"][0] * a["kernel"][1]
        case("col2im", f"F32.{tag}", [rnd((2, 3 * k, fold_blocks(a)), "F32")], lambda v, a=a: fold(v, a), args=a,
             tol_scale=2)
    a = folds["k3_p1_s2"]
    for dt in ("F16", "BF16", "F64"):
        case("col2im", f"{dt}.k3_p1_s2", [rnd((1, 2 * 9, fold_blocks(a)), dt)], lambda v, a=a: fold(v, a), args=a,
             tol_scale=2)
    a = folds["k2"]
    case("col2im", "F32.transposed", [Inp(rnd((2, fold_blocks(a), 8), "F32"), {"kind": "transpose", "dims": [1, 2]})],
         lambda v, a=a: fold(v, a), args=a)
    case("col2im", "F32.unbatched", [rnd((3 * 4, fold_blocks(a)), "F32")], lambda v, a=a: fold(v, a), args=a)
    case("col2im", "F32.special", [special("F32")[:8].reshape(1, 4, 2).repeat(1, 1, 10)], lambda v, a=a: fold(v, a),
         args=a)
    case("col2im", "F32.dynamic_batch", [Inp(rnd((3, 8, fold_blocks(a)), "F32"), sym={0: "n"})],
         lambda v, a=a: fold(v, a), args=a)
    case("col2im", "I32.k2", [rnd((1, 8, fold_blocks(a)), "I32")],
         lambda v, a=a: fold([v[0].double()], a).to(torch.int32), args=a)


# ----------------------------------------------------------------------------------------
# Reference evaluation and comparison
# ----------------------------------------------------------------------------------------
def as_list(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def reference(c: Case):
    xs = [apply_view(i.t, i.view) for i in c.inputs]
    if not c.upcast or not any(x.is_floating_point() for x in xs):
        return as_list(c.ref(xs))
    hi = as_list(c.ref([x.double() if x.is_floating_point() else x for x in xs]))
    try:
        native = as_list(c.ref(xs))
    except (RuntimeError, NotImplementedError):  # op not implemented natively for this dtype on CPU
        float_dts = [x.dtype for x in xs if x.is_floating_point()]
        native = [h.to(float_dts[0]) if h.is_floating_point() else h for h in hi]
    out = []
    for n, h in zip(native, hi):
        out.append(h.to(n.dtype) if n.is_floating_point() else n)
    return out


def compare(got, exp, scale):
    """(ok, max_abs_err, message)."""
    if tuple(got.shape) != tuple(exp.shape):
        return False, math.inf, f"shape {tuple(got.shape)} != torch {tuple(exp.shape)}"
    if got.dtype != exp.dtype:
        return False, math.inf, f"dtype {NAME.get(got.dtype, got.dtype)} != torch {NAME.get(exp.dtype, exp.dtype)}"
    if got.numel() == 0:
        return True, 0.0, ""
    if not exp.is_floating_point():
        bad = got != exp
        if bad.any():
            i = tuple(int(k) for k in bad.nonzero()[0])
            err = float((got.double() - exp.double()).abs().max())
            return False, err, f"{int(bad.sum())}/{bad.numel()} differ; first at {i}: luminal {got[i].item()} torch {exp[i].item()}"
        return True, 0.0, ""
    rtol, atol = TOL[NAME[exp.dtype]]
    g, e = got.double(), exp.double()
    nan_bad = torch.isnan(g) != torch.isnan(e)
    inf_e = torch.isinf(e)
    inf_bad = inf_e & (g != e)
    fin = torch.isfinite(e)
    err = torch.where(fin, (g - e).abs(), torch.zeros_like(e))
    err = torch.where(torch.isnan(err), torch.full_like(err, math.inf), err)
    tol = atol * scale + rtol * e.abs()
    val_bad = fin & (err > tol)
    # Zeros carry their sign exactly (trunc(-0.5) is -0.0, atan2(0.0, -0.0) is pi).
    zero_bad = (e == 0) & (g == 0) & (torch.signbit(g) != torch.signbit(e))
    bad = nan_bad | inf_bad | val_bad | zero_bad
    # Reported error: absolute, relative where |torch| > 1 (so exp(40) reads sensibly).
    max_err = float((err / e.abs().clamp(min=1.0)).max()) if fin.any() else 0.0
    if bad.any():
        i = tuple(int(k) for k in bad.nonzero()[0])
        kind = ("NaN mismatch" if nan_bad[i] else "inf mismatch" if inf_bad[i] else
                "signed zero" if zero_bad[i] else "value")
        return False, max_err, (f"{int(bad.sum())}/{bad.numel()} mismatch ({kind}); first at {i}: luminal "
                                f"{g[i].item():.9g} torch {e[i].item():.9g} (tol {float(tol[i]) if fin[i] else 0:.2g})")
    return True, max_err, ""


def run_runner(cases, workdir: Path):
    """Run the cases through luminal_op_runner: one process, or with backends (whose cold
    kernel compiles dominate) LUMINAL_OPS_JOBS processes (default: one per core) on
    interleaved slices. Returns {id: (outputs|None, error|None)}."""
    jobs = int(os.environ.get("LUMINAL_OPS_JOBS", os.cpu_count() or 1)) if BACKENDS else 1
    jobs = max(1, min(jobs, len(cases)))
    if jobs == 1:
        return run_runner_process(cases, workdir)
    from concurrent.futures import ThreadPoolExecutor
    dirs = [workdir / f"job{j}" for j in range(jobs)]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(jobs) as pool:
        parts = pool.map(lambda j: run_runner_process(cases[j::jobs], dirs[j]), range(jobs))
        results = {}
        for part in parts:
            results.update(part)
    return results


def save_inputs(cases, path: Path):
    tensors = {}
    for c in cases:
        for k, inp in enumerate(c.inputs):
            tensors[f"{c.id}.in.{k}"] = inp.t
    save_file(tensors, str(path))


def export_cases(out_dir: Path, jobs: int, ops=None):
    """Write the cases for runner processes elsewhere (a machine with more cores): job<j>/
    holds cases.json and inputs.safetensors of every jobs-th case. Run there
    `luminal_op_runner --search --backend cuda cases.json inputs.safetensors
    outputs.safetensors > stdout.txt` in each job dir, bring the dirs back, and replay them
    with LUMINAL_OPS_PRECOMPUTED=<dir>[:<dir>...] (several runs, e.g. one per backend, merge)."""
    cases = ALL_CASES  # the cases pytest generates (the generator is seeded once, at import)
    if ops:
        cases = [c for c in cases if c.op in ops]
    for j in range(jobs):
        d = out_dir / f"job{j}"
        d.mkdir(parents=True, exist_ok=True)
        part = cases[j::jobs]
        (d / "cases.json").write_text(json.dumps([c.to_json() for c in part]))
        save_inputs(part, d / "inputs.safetensors")


def parse_runner_stdout(text: str):
    started, errors, shapes, backend_errors = None, {}, {}, {}
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "start" in msg:
            started = msg["start"]
        elif "backends" in msg:
            backend_errors.setdefault(("", "*"), set()).update(msg["backends"])
        elif "backend_error" in msg:
            backend_errors[(msg["id"], msg["backend"])] = msg["backend_error"]
        elif "error" in msg:
            errors[msg["id"]] = msg["error"]
        elif "shapes" in msg:
            shapes[msg["id"]] = msg["shapes"]
    return started, errors, shapes, backend_errors


def collect_results(cases, outs, errors, shapes, backend_errors, crashed, backends):
    results = {}
    for c in cases:
        if c.id in crashed:
            results[c.id] = (None, crashed[c.id])
        elif c.id in errors:
            results[c.id] = (None, errors[c.id])
        elif c.id not in shapes:
            results[c.id] = (None, "no result (the runner did not finish this case)")
        else:
            k, got, backend_got = 0, [], {b: [] for b in backends}
            while f"{c.id}.{k}" in outs:
                got.append(outs[f"{c.id}.{k}"].reshape(shapes[c.id][k]))
                for b in backends:
                    if f"{c.id}.{b}.{k}" in outs:
                        backend_got[b].append(outs[f"{c.id}.{b}.{k}"].reshape(shapes[c.id][k]))
                k += 1
            results[c.id] = (got, None)
            for b in backends:  # a case a backend's run did not reach stays "not run"
                if backend_got[b] or (c.id, b) in backend_errors:
                    c.backend_raw[b] = (backend_got[b], backend_errors.get((c.id, b)))
    return results


def replay_precomputed(cases, roots):
    """Results of runner processes run elsewhere (export_cases): every job dir of every root.
    The backends are those the runs reported (an output or an error named for them)."""
    outs, errors, shapes, backend_errors, found = {}, {}, {}, {}, set()
    for root in roots:
        for d in sorted(Path(root).glob("job*")):
            _, e, sh, be = parse_runner_stdout((d / "stdout.txt").read_text())
            found |= be.pop(("", "*"), set())  # the runner's {"backends": [...]} line
            errors.update(e)
            shapes.update(sh)
            backend_errors.update(be)
            outs.update(load_file(str(d / "outputs.safetensors")))
    backends = [b for b in KNOWN_BACKENDS if b in found] + sorted(found - set(KNOWN_BACKENDS))
    return collect_results(cases, outs, errors, shapes, backend_errors, {}, backends), backends


def run_runner_process(cases, workdir: Path):
    """Run every case through one luminal_op_runner process. Returns {id: (outputs|None, error|None)}.
    If the process dies (an internal assertion), the case it was running is recorded as crashed
    and the rest are run again without it."""
    inputs_path = workdir / "inputs.safetensors"
    save_inputs(cases, inputs_path)
    crashed = {}
    while True:
        todo = [c for c in cases if c.id not in crashed]
        cases_path = workdir / "cases.json"
        out_path = workdir / "outputs.safetensors"
        cases_path.write_text(json.dumps([c.to_json() for c in todo]))
        search = [] if os.environ.get("LUMINAL_OPS_SEARCH") == "0" else ["--search"]
        backends = [a for b in BACKENDS for a in ("--backend", b)]
        p = subprocess.run([str(RUNNER), *search, *backends, str(cases_path), str(inputs_path), str(out_path)],
                           capture_output=True, text=True, timeout=3600)
        started, errors, shapes, backend_errors = parse_runner_stdout(p.stdout)
        backend_errors.pop(("", "*"), None)
        if p.returncode != 0:
            if started is None or started in crashed:
                raise RuntimeError(f"luminal_op_runner failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
            crashed[started] = f"runner crashed (rc {p.returncode}): {p.stderr.strip()[-600:]}"
            continue
        outs = load_file(str(out_path))
        break
    return collect_results(cases, outs, errors, shapes, backend_errors, crashed, BACKENDS)


def evaluate_backend(c: Case, backend: str):
    """A backend's outputs against the reference runtime's (same tolerances)."""
    if backend not in c.backend_raw:
        return {"ok": False, "msg": "not run on this backend"}
    got, error = c.backend_raw[backend]
    if c.result_raw is None:
        return {"ok": False, "msg": "no reference result"}
    if error is not None:
        return {"ok": False, "msg": f"error: {error}"}
    if len(got) != len(c.result_raw):
        return {"ok": False, "msg": f"{len(got)} outputs, the reference has {len(c.result_raw)}"}
    msgs = []
    for k, (g, e) in enumerate(zip(got, c.result_raw)):
        ok, _, msg = compare(g, e, c.tol_scale)
        if not ok:
            msgs.append(f"output {k}: {msg}")
    return {"ok": not msgs, "msg": "; ".join(msgs)}


def evaluate(c: Case, got, error):
    if error is not None:
        return {"ok": False, "err": math.inf, "msg": f"error: {error}"}
    try:
        exp = reference(c)
    except Exception as e:  # a bad case is a harness bug: surface it
        return {"ok": False, "err": math.inf, "msg": f"torch reference raised: {e!r}"}
    if len(got) != len(exp):
        return {"ok": False, "err": math.inf, "msg": f"{len(got)} outputs, torch has {len(exp)}"}
    ok, err, msgs = True, 0.0, []
    for k, (g, e) in enumerate(zip(got, exp)):
        o, m_err, msg = compare(g, e, c.tol_scale)
        ok &= o
        err = max(err, m_err)
        if msg:
            msgs.append(f"output {k}: {msg}")
    return {"ok": ok, "err": err, "msg": "; ".join(msgs)}


# ----------------------------------------------------------------------------------------
# docs/ops.md
# ----------------------------------------------------------------------------------------
NOTES = """\
## Method

* Every case is one `GraphTensor` op on the ReferenceRuntime (`tests/python/op_runner.cpp`),
  compared with PyTorch on CPU (`tests/python/test_ops.py`, fixed seed; regenerate this file
  with `LUMINAL_WRITE_OPS_MD=1 LUMINAL_BIN_DIR=build/release .venv/bin/python -m pytest -q tests/python/test_ops.py`).
* Float references are computed by torch in float64 on the exact input values and rounded
  once to the dtype torch returns for the op, so a F16/BF16 reference is the correctly
  rounded result. Integer and Bool results are computed natively and must match exactly;
  result dtypes and shapes must match torch's.
* Tolerance per result dtype, |luminal - torch| <= atol * s + rtol * |torch|, with s = 1 for
  elementwise ops and about sqrt(reduced count) for reductions, matmul and convolutions:
  F64 rtol = atol = 1e-9; F32 1e-5; F16 1e-2; BF16 2e-2. NaN positions, infinities and the
  sign of zeros must match exactly. Cases tagged "near" use s = 0 (a purely relative
  tolerance), so tiny results (log1p(1e-30)) must be accurate too.
* "view" cases feed the op a non-contiguous input (transpose, strided slice, broadcast
  expand); "dynamic" cases declare a symbolic dim (`Expression::var`) bound at execute;
  "inf/nan" cases feed 0, -0, +-inf, NaN and friends.
* Sort-like ops use distinct values (no tie ambiguity), except the explicit tie cases for
  first-occurrence argmax/argmin and stable argsort.
* Random ops (`rand`, `randn`, `dropout_stats`) cannot match torch's generator: their cases
  compare statistics (mean, variance, lag-1 correlation, determinism per seed, range) with
  their expected values.
* The backend columns (LUMINAL_OPS_BACKENDS=cpu,cuda): every case also compiled for the
  backend (its rules, first candidate, no search) and compared with the reference
  runtime's result, with the same tolerances. The CUDA column comes from the GPU machine:
  the cases are exported (`python tests/python/test_ops.py --export DIR --jobs N`), run
  there by `luminal_op_runner --search --backend cuda` (`scripts/gpu`, stage "ops"), and
  replayed here with `LUMINAL_OPS_PRECOMPUTED=DIR_CPU:DIR_CUDA` (later runs override
  earlier ones; "k not run" counts cases the replayed runs did not include). The current
  columns: CPU on the 2-core development machine, CUDA on the H200, 2026-11-30 (session 5).

## Intended differences from PyTorch

* Scalars are `double` in the C++ API, so C++ cannot tell `x % 3` from `x % 3.0`: an
  integral scalar keeps an integer tensor's dtype (torch would give F32 for a Python float),
  a non-integral one promotes it to F32. The integer-tensor scalar cases use Python ints.
* luminal has no I16: U8 with I8 promotes to I32 (torch: int16).
* `matmul` promotes mixed dtypes like the elementwise ops (torch refuses mixed dtypes); the
  reference for that case is torch on the promoted dtype.
* F16/BF16 `exp`, `cos`, `tan`, `mean`, `var`, `std`, `layer_norm` and `rms_norm` compute in
  F32 (F64 for cos/tan) and round once at the end, like torch's CPU kernels; F32 `cos`/`tan`
  shift their argument in F64.
* Float-to-int casts of out-of-range values and NaN are not tested (undefined in C++,
  platform dependent in torch).
"""


def write_ops_md(cases, backends):
    groups = defaultdict(list)
    for c in cases:
        groups[c.op].append(c)
    lines = ["# Op parity with PyTorch", "",
             "Generated by `tests/python/test_ops.py` (do not edit by hand). One row per `GraphTensor` op;",
             "a row passes when every case of that op matches torch.", "",
             f"**{sum(c.result['ok'] for c in cases)} / {len(cases)} cases pass; "
             f"{sum(all(c.result['ok'] for c in g) for g in groups.values())} / {len(groups)} ops fully pass.**", "",
             "| op | dtypes | cases | tested | status | max error (abs; rel where abs(torch) > 1) | "
             + " | ".join(f"{b.upper()} backend" for b in KNOWN_BACKENDS) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(KNOWN_BACKENDS)]
    for op, cs in groups.items():
        dts = []
        for c in cs:
            if c.dtype not in dts:
                dts.append(c.dtype)
        feats = set()
        for c in cs:
            feats |= c.features()
        ranks = sorted({apply_view(c.inputs[0].t, c.inputs[0].view).dim() for c in cs if c.inputs})
        tested = ", ".join([f"rank {'/'.join(map(str, ranks))}"] + sorted(feats))
        n_ok = sum(c.result["ok"] for c in cs)
        status = "pass" if n_ok == len(cs) else f"**FAIL** ({len(cs) - n_ok}/{len(cs)})"
        errs = defaultdict(float)
        for c in cs:
            if c.result["err"] != math.inf:
                errs[c.dtype] = max(errs[c.dtype], c.result["err"])
        err = ", ".join(f"{d} {e:.1e}" for d, e in errs.items() if e > 0) or "0"
        columns = []
        for b in KNOWN_BACKENDS:
            ran = [c for c in cs if b in c.backend_raw]
            if b not in backends or not ran:
                columns.append("not run")
                continue
            n_bad = sum(not c.backend_result[b]["ok"] for c in ran)
            text = "pass" if n_bad == 0 else f"**FAIL** ({n_bad}/{len(ran)})"
            if len(ran) < len(cs):
                text += f" ({len(cs) - len(ran)} not run)"
            columns.append(text)
        lines.append(f"| `{op}` | {' '.join(dts)} | {len(cs)} | {tested} | {status} | {err} | {' | '.join(columns)} |")
    lines += ["", NOTES, "## Failing cases", ""]
    failing = [c for c in cases if not c.result["ok"]]
    if not failing:
        lines.append("None.")
    for c in failing:
        msg = c.result["msg"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"* `{c.id}`: {msg[:400]}")
    for b in KNOWN_BACKENDS:
        lines += ["", f"## Failing cases on the {b.upper()} backend", ""]
        if b not in backends:
            lines.append(f"Not run (LUMINAL_OPS_BACKENDS={b} runs every case on this backend too).")
            continue
        failing = [c for c in cases if b in c.backend_raw and not c.backend_result[b]["ok"]]
        if not failing:
            lines.append("None.")
        for c in failing:
            msg = c.backend_result[b]["msg"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"* `{c.id}`: {msg[:400]}")
    (REPO_ROOT / "docs").mkdir(exist_ok=True)
    (REPO_ROOT / "docs" / "ops.md").write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------------------
# pytest
# ----------------------------------------------------------------------------------------
ALL_CASES = gen_all()
OPS = list(dict.fromkeys(c.op for c in ALL_CASES))


@pytest.fixture(scope="session")
def parity_results(request):
    if not RUNNER.is_file():
        pytest.fail(f"{RUNNER} not found: build it (cmake --build build/release) or set LUMINAL_BIN_DIR")
    # Only the ops pytest selected (-k), unless docs/ops.md is being written.
    selected = {item.callspec.params["op"] for item in request.session.items
                if getattr(item, "function", None) in (test_op, test_op_backend)}
    cases = ALL_CASES if os.environ.get("LUMINAL_WRITE_OPS_MD") == "1" else [c for c in ALL_CASES if c.op in selected]
    backends = BACKENDS
    if os.environ.get("LUMINAL_OPS_PRECOMPUTED"):
        raw, backends = replay_precomputed(cases, os.environ["LUMINAL_OPS_PRECOMPUTED"].split(os.pathsep))
    else:
        with tempfile.TemporaryDirectory() as d:
            raw = run_runner(cases, Path(d))
    for c in cases:
        got, error = raw[c.id]
        c.result = evaluate(c, got, error)
        c.result_raw = got
        for b in backends:
            c.backend_result[b] = evaluate_backend(c, b)
    if os.environ.get("LUMINAL_WRITE_OPS_MD") == "1":
        write_ops_md(ALL_CASES, backends)
    return {c.id: c.result for c in cases}


@pytest.mark.parametrize("backend", BACKENDS or ["cpu"])
@pytest.mark.parametrize("op", OPS)
def test_op_backend(op, backend, parity_results):
    if backend not in BACKENDS:
        pytest.skip("set LUMINAL_OPS_BACKENDS=cpu (or cuda, on a GPU) to run the op-parity cases on a backend too")
    cases = [c for c in ALL_CASES if c.op == op]
    if os.environ.get("LUMINAL_OPS_PRECOMPUTED"):  # replayed runs may cover part of the cases
        cases = [c for c in cases if backend in c.backend_raw]
    if not cases or not any(backend in c.backend_result for c in cases):
        pytest.skip(f"no {backend} results (LUMINAL_OPS_PRECOMPUTED without them)")
    failures = [f"  {c.id}: {c.backend_result[backend]['msg']}" for c in cases if not c.backend_result[backend]["ok"]]
    assert not failures, f"{op}: {len(failures)}/{len(cases)} cases differ on the {backend} backend:\n" + "\n".join(failures)


@pytest.mark.parametrize("op", OPS)
def test_op(op, parity_results):
    cases = [c for c in ALL_CASES if c.op == op]
    failures = [f"  {c.id}: max err {c.result['err']:.3g}: {c.result['msg']}" for c in cases if not c.result["ok"]]
    assert not failures, f"{op}: {len(failures)}/{len(cases)} cases differ from torch:\n" + "\n".join(failures)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="export the op-parity cases for runner processes elsewhere")
    ap.add_argument("--export", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--ops", default="", help="comma-separated ops (default: every case)")
    a = ap.parse_args()
    export_cases(a.export, a.jobs, set(filter(None, a.ops.split(","))))
