"""FX graph (core ATen) -> luminal Graph.

One translator serves both entry points: the torch.export path (luminal.torch.compile)
and the torch.compile backend (through AOTAutograd). It walks the FX graph once; each
call_function node is translated by the function registered for its ATen op in
`_ops.TABLE`. Values are GraphTensors, Python scalars, luminal Expressions (symbolic
sizes) or tuples of those.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx

import luminal

from . import _ops

_TORCH_TO_LUMINAL = {
    torch.float32: luminal.DType.F32, torch.float16: luminal.DType.F16, torch.bfloat16: luminal.DType.BF16,
    torch.float64: luminal.DType.F64, torch.int32: luminal.DType.I32, torch.int64: luminal.DType.I64,
    torch.int8: luminal.DType.I8, torch.uint8: luminal.DType.U8, torch.bool: luminal.DType.Bool,
}
_LUMINAL_TO_TORCH = {v: k for k, v in _TORCH_TO_LUMINAL.items()}


class UnsupportedOpError(NotImplementedError):
    """An ATen op (or a use of it) that luminal cannot translate. The message names the
    op and the line of the user's model that produced it."""


def to_luminal_dtype(dtype: torch.dtype) -> luminal.DType:
    try:
        return _TORCH_TO_LUMINAL[dtype]
    except KeyError:
        raise UnsupportedOpError(f"dtype {dtype} has no luminal equivalent") from None


def to_torch_dtype(dtype: luminal.DType) -> torch.dtype:
    return _LUMINAL_TO_TORCH[dtype]


def user_source_line(node: torch.fx.Node) -> str:
    """The innermost frame of the user's code in the node's stack trace ("" when unknown)."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    # Prefer the last frame outside torch itself: that is the model's line.
    for path, line, func, code in reversed(frames):
        if "/torch/" not in path:
            return f'{path}:{line} in {func}: {code.strip()}'
    if frames:
        path, line, func, code = frames[-1]
        return f'{path}:{line} in {func}: {code.strip()}'
    return ""


def describe(node: torch.fx.Node) -> str:
    where = user_source_line(node)
    return f"{op_name(node.target)}" + (f" (from {where})" if where else "")


def op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._opname}.{target._overloadname}" if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


# The label of the random-number offset input (see Translator.random_source).
RNG_OFFSET = "__luminal_rng_offset"


@dataclass
class Input:
    """A graph input: where its data comes from at call time."""
    name: str                       # luminal label (parameter FQN or "input_<i>")
    tensor: luminal.GraphTensor
    kind: str                       # "user", "parameter", "buffer", "constant", "rng"
    index: int = -1                 # position among user inputs (kind == "user")
    dtype: torch.dtype = torch.float32


@dataclass
class Translation:
    graph: luminal.Graph
    inputs: list[Input] = field(default_factory=list)
    # Each output: ("tensor", GraphTensor, torch dtype, meta shape), ("input", user index),
    # ("param", name), or ("value", python value).
    outputs: list[tuple] = field(default_factory=list)
    # Symbolic dims: name -> (hint, lo, hi), and where to read each at call time:
    # (user input index, axis) for tensors, (user input index, None) for SymInt inputs.
    dims: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    dim_sources: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    ops_used: set[str] = field(default_factory=set)
    # User inputs that were specialised to a Python int: the value they must keep.
    int_inputs: dict[int, int] = field(default_factory=dict)


class Translator:
    """Translate one FX graph. `placeholder_kind(node, index)` tells what a placeholder is:
    (kind, name) with kind in user/parameter/buffer/constant."""

    def __init__(self, gm: torch.fx.GraphModule, placeholder_kind: Callable[[torch.fx.Node, int], tuple[str, str]],
                 mutations: dict[int, str] | None = None, device: str = "cpu"):
        self.gm = gm
        self.device = device  # the torch device type of the runtime's data ("cpu", "cuda")
        # Output position -> label of the input it overwrites (buffer mutations).
        self.mutations = mutations or {}
        self.placeholder_kind = placeholder_kind
        self.g = luminal.Graph()
        self.result = Translation(self.g)
        self.env: dict[torch.fx.Node, Any] = {}
        self.deferred: dict[torch.fx.Node, Callable[[], Any]] = {}  # weights not used yet (_value)
        self.node: torch.fx.Node | None = None
        self.rng_offset: luminal.GraphTensor | None = None
        self.rng_ops = 0

    # ---- random numbers ----
    def random_source(self) -> tuple[int, luminal.GraphTensor]:
        """(seed, offset) for one random op: each op gets its own seed, and all share one
        I64 offset input that the program draws from torch's default generator on every
        call (_Program.run), so every call draws fresh numbers and torch.manual_seed makes
        them reproducible."""
        if self.rng_offset is None:
            self.rng_offset = self.g.named_tensor(RNG_OFFSET, [], luminal.DType.I64).persist()
            self.result.inputs.append(Input(RNG_OFFSET, self.rng_offset, "rng", -1, torch.int64))
        self.rng_ops += 1
        return self.rng_ops, self.rng_offset

    # ---- symbolic sizes ----
    def size(self, s) -> int | luminal.Expression:
        """A torch size (int or SymInt) as an int or a luminal Expression."""
        if isinstance(s, int):
            return s
        if isinstance(s, torch.SymInt):
            expr = s.node.expr
            if expr.is_number:
                return int(expr)
            self._note_symbols(s, expr)
            return _sympy_to_expression(expr)
        if isinstance(s, luminal.Expression):
            return s
        raise UnsupportedOpError(f"{self.where()}: size {s!r} of type {type(s).__name__} is not an int or SymInt")

    def shape(self, val) -> list:
        return [self.size(s) for s in val.shape]

    def _note_symbols(self, s: torch.SymInt, expr) -> None:
        env = s.node.shape_env
        for sym in expr.free_symbols:
            name = str(sym)
            if name in self.result.dims:
                continue
            hint = getattr(env, "backed_var_to_val", None)
            hint = (hint if hint is not None else env.var_to_val).get(sym)
            rng = env.var_to_range.get(sym)
            lo = _finite_int(rng.lower if rng is not None else None, 0)
            hi = _finite_int(rng.upper if rng is not None else None, 1 << 20)
            hint = int(hint) if hint is not None else max(lo, 1)
            self.result.dims[name] = (hint, lo, min(hi, 1 << 20))
            self.g.set_dim(name, hint)

    def where(self) -> str:
        return describe(self.node) if self.node is not None else "luminal.torch"

    # ---- the walk ----
    def run(self) -> Translation:
        user_index = 0
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                kind, name = self.placeholder_kind(node, user_index)
                if kind != "user" and isinstance(node.meta.get("val"), torch.Tensor):
                    # Weights are created where first used (below), not all up front.
                    self.deferred[node] = lambda node=node, kind=kind, name=name: self._placeholder(node, kind, name, -1)
                else:
                    self.env[node] = self._placeholder(node, kind, name, user_index if kind == "user" else -1)
                if kind == "user":
                    user_index += 1
            elif node.op == "get_attr":
                value = getattr_path(self.gm, node.target)
                if not isinstance(value, torch.Tensor):
                    raise UnsupportedOpError(f"{self.where()}: get_attr of a {type(value).__name__}")
                self.deferred[node] = lambda node=node, value=value: self._tensor_input(
                    node.target, "constant", value.dtype, self.shape(value), -1)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                for waiting in list(self.deferred):  # outputs and buffer mutations name them too
                    self._value(waiting)
                self._outputs(node)
            else:
                raise UnsupportedOpError(f"{self.where()}: FX node kind '{node.op}' is not supported")
        return self.result

    def _value(self, node: torch.fx.Node):
        """The translation of `node`; a weight (parameter, buffer, constant) becomes an input
        of the graph on its first use. Created up front, every layer's weights would precede
        every layer, and the layers would not repeat node for node: the compiler searches a
        repeated layer once (docs/SEARCH.md, Repeated structure), and without it a deep model
        was one segment whose extraction costs, summed along the residual stream, grew past
        the precision that tells a GEMM from an elementwise product."""
        make = self.deferred.pop(node, None)
        if make is not None:
            saved, self.node = self.node, node
            self.env[node] = make()
            self.node = saved
        return self.env[node]

    def _placeholder(self, node, kind, name, index):
        val = node.meta.get("val")
        if isinstance(val, int) and index >= 0:
            self.result.int_inputs[index] = val
        if isinstance(val, torch.SymInt) or isinstance(val, int):
            expr = self.size(val)
            if isinstance(expr, luminal.Expression) and not expr.is_constant():
                (sym,) = expr.variables()
                self.result.dim_sources.setdefault(sym, (index, None))
            return expr
        if not isinstance(val, torch.Tensor):
            raise UnsupportedOpError(f"{self.where()}: input '{node.name}' of type {type(val).__name__} "
                                     "is not a tensor or an int")
        shape = self.shape(val)
        if kind == "user":
            for axis, s in enumerate(val.shape):
                if isinstance(s, torch.SymInt) and not s.node.expr.is_number and s.node.expr.is_Symbol:
                    self.result.dim_sources.setdefault(str(s.node.expr), (index, axis))
        return self._tensor_input(name, kind, val.dtype, shape, index)

    def _tensor_input(self, name, kind, dtype, shape, index):
        t = self.g.named_tensor(name, shape, to_luminal_dtype(dtype)).persist()
        self.result.inputs.append(Input(name, t, kind, index, dtype))
        return t

    def _call(self, node):
        target = node.target
        if target in _SKIP:
            return None
        translate = _ops.TABLE.get(target)
        if translate is None and isinstance(target, torch._ops.OpOverload):
            translate = _ops.TABLE.get(target.overloadpacket)
        if translate is None:
            raise UnsupportedOpError(
                f"luminal cannot translate {describe(node)}. Supported ops are listed in docs/torch_ops.md.")
        self.result.ops_used.add(op_name(target))
        args = torch.fx.node.map_arg(node.args, self._value)
        kwargs = torch.fx.node.map_arg(node.kwargs, self._value)
        try:
            out = translate(self, node, *args, **kwargs)
        except UnsupportedOpError as e:
            if "(from " in str(e) or describe(node) in str(e):
                raise
            raise UnsupportedOpError(f"{describe(node)}: {e}") from None
        except luminal.Error as e:
            raise UnsupportedOpError(f"luminal could not translate {describe(node)}: {e}") from e
        return self._check(node, out)

    def _check(self, node, out):
        """Match the dtype PyTorch computed (casting when the tensor API chose another) and
        refuse a shape that disagrees: a wrong result is never silent."""
        val = node.meta.get("val")
        if isinstance(out, luminal.GraphTensor) and isinstance(val, torch.Tensor):
            want = to_luminal_dtype(val.dtype)
            if out.dtype != want:
                out = out.cast(want)
            shape = self.shape(val)
            if len(shape) != out.rank or any(
                    _const(a) is not None and _const(b) is not None and _const(a) != _const(b)
                    for a, b in zip(shape, out.shape)):
                raise UnsupportedOpError(
                    f"internal error translating {describe(node)}: luminal shape {[str(s) for s in out.shape]} "
                    f"!= PyTorch shape {list(val.shape)}")
        return out

    def _outputs(self, node):
        (values,) = node.args
        flat = values if isinstance(values, (list, tuple)) else [values]
        cache: dict[torch.fx.Node, tuple] = {}
        by_label = {inp.name: inp for inp in self.result.inputs}
        for pos, v in enumerate(flat):
            if pos in self.mutations:
                # The persisted input holds the new value after each execute (KV caches).
                state = by_label[self.mutations[pos]]
                value = self.env[v]
                if not isinstance(value, luminal.GraphTensor):
                    raise UnsupportedOpError(f"mutation of '{state.name}' with a non-tensor value")
                if value.dtype != state.tensor.dtype:
                    value = value.cast(state.tensor.dtype)
                self.result.outputs.append(("mutation", self.g.update(state.tensor, value), state.dtype))
                continue
            if isinstance(v, torch.fx.Node) and v in cache:
                self.result.outputs.append(cache[v])
                continue
            out = self._output(v)
            if isinstance(v, torch.fx.Node):
                cache[v] = out
            self.result.outputs.append(out)

    def _output(self, v):
        if not isinstance(v, torch.fx.Node):
            return ("value", v)
        value = self.env[v]
        if v.op == "placeholder":
            for inp in self.result.inputs:
                if inp.tensor is value:
                    # Pass-through: hand back the caller's own tensor, as eager does.
                    return ("input", inp.index) if inp.kind == "user" else ("param", inp.name)
        if isinstance(value, luminal.GraphTensor):
            val = v.meta.get("val")
            return ("tensor", value.output(), val.dtype, val.shape)
        if isinstance(value, luminal.Expression):
            return ("size", value)
        return ("value", value)


_SKIP = {
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten._assert_scalar.default,
}


def _finite_int(v, default: int) -> int:
    """A range bound as an int; infinite or unknown bounds (int_oo) give `default`."""
    try:
        if v is None or not bool(v.is_number) or v.is_infinite or str(v) in ("oo", "-oo", "int_oo", "-int_oo"):
            return default
        return int(v)
    except (TypeError, ValueError, AttributeError):
        return default


def _const(e):
    if isinstance(e, int):
        return e
    return e.as_constant()


def _sympy_to_expression(expr):
    import sympy
    from torch.utils._sympy import functions as F

    rec = _sympy_to_expression
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return luminal.Expression.var(str(expr))
    args = [rec(a) for a in expr.args]
    if isinstance(expr, sympy.Add):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if isinstance(expr, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(expr, F.FloorDiv):
        return luminal.Expression(args[0]) // luminal.Expression(args[1])
    if isinstance(expr, (F.Mod, F.PythonMod)):
        return luminal.Expression(args[0]) % luminal.Expression(args[1])
    raise UnsupportedOpError(f"symbolic size {expr} ({type(expr).__name__}) has no luminal expression")


def getattr_path(obj, target: str):
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# Python operators on sizes (SymInt arithmetic in the graph).
for _op in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg):
    _ops.TABLE.setdefault(_op, lambda t, node, *a, _op=_op: _op(*a))
_ops.TABLE[operator.getitem] = lambda t, node, seq, i: _ops.getitem(t, node, seq, i)
