"""PyTorch frontend of luminal.

Two entry points share one translator (core ATen -> luminal tensor API):

* ``luminal.torch.compile(model, example_inputs, dynamic_shapes=...)``: the torch.export
  path. Parameters and buffers become persisted, named luminal inputs; torch.export's
  symbolic sizes become luminal dims with their ranges as dim buckets (a new sequence
  length does not recompile); buffer mutations (static KV caches) are written back.
* ``torch.compile(model, backend="luminal", options={...})``: registered through the
  ``torch_dynamo_backends`` entry point; AOTAutograd hands the backend a functional
  core-ATen graph, and input mutations are applied by AOTAutograd itself.

An ATen op luminal cannot translate raises UnsupportedOpError naming the op and the
line of the model it came from; under torch.compile it is a graph break instead (the op
runs in PyTorch, with a warning naming it), or the same error with fallback="error". A
tensor on a device the runtime does not run on is an error, never a silent move.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

import torch
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind as _InputKind
from torch.export.graph_signature import OutputKind as _OutputKind

import luminal

from ._translate import Translation, Translator, UnsupportedOpError, describe, to_torch_dtype  # noqa: F401

__all__ = ["compile", "dynamo_backend", "UnsupportedOpError", "CompiledModule", "stats", "DEFAULT_OPTIONS",
           "export_decompositions"]

# Counters tests and users can read: how many graphs were translated and compiled.
stats = {"compiles": 0}

# Search budget used when none is given: the reference runtime is an interpreter, so
# profiling many candidates of a whole model costs more than it gains.
DEFAULT_OPTIONS = {"search_budget": 1, "runtime": "reference"}


def _compile_options(translation: Translation, opts: dict) -> luminal.CompileOptions:
    kwargs = {"search_graph_limit": int(opts.get("search_budget", DEFAULT_OPTIONS["search_budget"])),
              "seed": int(opts.get("seed", 0)), "verbose": bool(opts.get("verbose", False))}
    if "search_time_limit_s" in opts:
        kwargs["search_time_limit_s"] = float(opts["search_time_limit_s"])
    o = luminal.CompileOptions(**kwargs)
    for name, (hint, lo, hi) in translation.dims.items():
        lo = max(lo, 0)
        hi = max(hi, lo)
        o.dim_buckets(name, [luminal.DimBucket(lo, hi, min(max(hint, lo), hi))])
    return o


def export_decompositions():
    """The decomposition table luminal.torch.compile hands run_decompositions(): PyTorch's
    default (core ATen) less the ops luminal translates whole (_ops.KEEP_WHOLE)."""
    from . import _ops

    table = torch.export.default_decompositions()
    for op in _ops.KEEP_WHOLE:
        table.pop(op, None)
    return table


def _runtime_device(opts: dict) -> str:
    """The torch device type the chosen runtime's data lives on ("cpu", "cuda")."""
    runtime = opts.get("runtime", DEFAULT_OPTIONS["runtime"])
    known = {r["name"]: r for r in luminal.runtimes()}
    if runtime not in known:
        raise ValueError(f"luminal.torch: unknown runtime '{runtime}' (available: {', '.join(known)})")
    return known[runtime]["device"]


class _Program:
    """A translated graph compiled into a runtime, fed from torch tensors.

    Every input is persisted in the runtime; an input is uploaded again only when the
    caller hands a different tensor object or the same one after an in-place change (its
    version counter moved), so weights cross once."""

    def __init__(self, translation: Translation, opts: dict):
        self.t = translation
        self.device = _runtime_device(opts)
        runtime = opts.get("runtime", DEFAULT_OPTIONS["runtime"])
        self.rt = luminal.compile(translation.graph, runtime, _compile_options(translation, opts))
        self.uploaded: dict[int, tuple[Any, int]] = {}
        stats["compiles"] += 1

    def check_device(self, tensors: Sequence[Any], what: str) -> None:
        for i, x in enumerate(tensors):
            if isinstance(x, torch.Tensor) and x.device.type != self.device:
                raise RuntimeError(
                    f"luminal.torch: {what} {i} is on '{x.device}' but runtime '{self.rt.name}' runs on "
                    f"'{self.device}'; luminal never moves data between devices silently (move the model and "
                    f"inputs, or choose a runtime for that device: {[r['name'] for r in luminal.runtimes()]})")

    def dims(self, args: Sequence[Any]) -> dict[str, int]:
        out = {}
        for name, (index, axis) in self.t.dim_sources.items():
            v = args[index]
            out[name] = int(v.shape[axis]) if axis is not None else int(v)
        return out

    def _upload(self, slot: int, inp, value: torch.Tensor) -> None:
        try:
            version = value._version
        except RuntimeError:  # inference tensors carry no version counter: always upload
            version = None
        seen = self.uploaded.get(slot)
        if version is not None and seen is not None and seen[0]() is value and seen[1] == version:
            return
        data = value.detach()
        if data.device.type != "cpu":
            # The runtime interface takes host data (Runtime::set_tensor); a device runtime
            # uploads it itself. The caller's tensor is on the runtime's device (check_device).
            data = data.cpu()
        self.rt.set_data(inp.tensor, data)
        self.uploaded[slot] = (weakref.ref(value), version) if version is not None else (lambda: None, -1)

    def mark_current(self, slot: int, value: torch.Tensor) -> None:
        """The runtime already holds `value` (it wrote it): skip the next upload."""
        try:
            self.uploaded[slot] = (weakref.ref(value), value._version)
        except RuntimeError:
            self.uploaded.pop(slot, None)

    def check_inputs(self, args: Sequence[Any]) -> None:
        """Inputs must match what was compiled: a float64 tensor fed to a float32 graph, or
        another size where the size is static, would otherwise be converted silently."""
        for inp in self.t.inputs:
            if inp.kind != "user":
                continue
            x = args[inp.index]
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"luminal.torch: input {inp.index} must be a tensor, got {type(x).__name__}")
            want = [int(s) if s.is_constant() else None for s in inp.tensor.shape]
            if x.dtype != inp.dtype or x.dim() != len(want) or any(
                    w is not None and w != n for w, n in zip(want, x.shape)):
                shown = ["*" if w is None else w for w in want]
                raise ValueError(f"luminal.torch: input {inp.index} has dtype {x.dtype} and shape {list(x.shape)}; "
                                 f"the model was compiled for {inp.dtype} and shape {shown} (* is dynamic)")
        for index, value in self.t.int_inputs.items():
            if args[index] != value:
                raise ValueError(f"luminal.torch: input {index} was specialised to {value} when compiling; "
                                 f"got {args[index]}")

    def run(self, args: Sequence[Any], params: dict[str, torch.Tensor]) -> list:
        self.check_device([a for a in args if isinstance(a, torch.Tensor)], "input")
        self.check_inputs(args)
        for slot, inp in enumerate(self.t.inputs):
            if inp.kind == "rng":
                value = _rng_offset()
            else:
                value = args[inp.index] if inp.kind == "user" else params[inp.name]
            self._upload(slot, inp, value)
        dims = self.dims(args)
        self.rt.execute(dims)
        outs = []
        for o in self.t.outputs:
            kind = o[0]
            if kind in ("tensor", "mutation"):
                outs.append(self._read(o[1], o[2], dims))
            elif kind == "input":
                outs.append(args[o[1]])
            elif kind == "param":
                outs.append(params[o[1]])
            elif kind == "size":
                outs.append(o[1].eval(dims) if isinstance(o[1], luminal.Expression) else o[1])
            else:
                outs.append(o[1])
        return outs

    def _read(self, tensor: luminal.GraphTensor, dtype: torch.dtype, dims: dict) -> torch.Tensor:
        out = torch.from_dlpack(self.rt.get_dlpack(tensor))
        shape = [int(s) if s.is_constant() else s.eval(dims) for s in tensor.shape]
        if list(out.shape) != shape:
            out = out.reshape(shape)
        if self.device != "cpu":  # outputs come back through the host; hand them out where the inputs live
            out = out.to(self.device)
        return out if out.dtype == dtype else out.to(dtype)


def _rng_offset() -> torch.Tensor:
    """A fresh counter offset for luminal's random ops, drawn from torch's default CPU
    generator: a multiple of 2^32, so the counters of one call (fewer than 2^31 elements
    per op) never reach another call's."""
    return torch.randint(0, 1 << 30, (), dtype=torch.int64) * (1 << 32)


class CompiledModule:
    """The result of luminal.torch.compile: call it like the model."""

    def __init__(self, model, exported, program: _Program, params: dict, mutations: dict):
        self.model = model
        self.exported = exported
        self.program = program
        self.params = params
        self.mutations = mutations  # output position -> ("buffer", fqn) | ("input", user index)
        sig = exported.graph_signature
        self._n_user_inputs = sum(1 for s in sig.input_specs if s.kind == _InputKind.USER_INPUT)
        self._user_outputs = [i for i, s in enumerate(sig.output_specs) if s.kind == _OutputKind.USER_OUTPUT]
        # Read once: ExportedProgram.call_spec builds a new NamedTuple class on every access,
        # which cost more than a small model's whole run (about 120 us of a 200 us call).
        self._out_spec = exported.call_spec.out_spec
        self._slots = {inp.name: i for i, inp in enumerate(program.t.inputs)}

    @property
    def runtime(self) -> luminal.Runtime:
        return self.program.rt

    @property
    def graph(self) -> luminal.Graph:
        return self.program.t.graph

    def __call__(self, *args, **kwargs):
        flat, _ = pytree.tree_flatten((args, kwargs))
        if len(flat) != self._n_user_inputs:
            raise TypeError(f"luminal.torch: the compiled model takes {self._n_user_inputs} inputs "
                            f"(flattened), got {len(flat)}")
        outs = self.program.run(flat, self.params)
        if self.mutations:
            with torch.no_grad():
                for pos, (kind, target) in self.mutations.items():
                    dest = self.params[target] if kind == "buffer" else flat[target]
                    dest.copy_(outs[pos])
                    if kind == "buffer":
                        self.program.mark_current(self._slots[target], dest)
        user = [outs[i] for i in self._user_outputs]
        return pytree.tree_unflatten(user, self._out_spec)


def compile(model: torch.nn.Module, example_inputs: Sequence[Any], dynamic_shapes: Any = None, *,
            example_kwargs: dict | None = None, options: dict | None = None, **option_kwargs) -> CompiledModule:
    """Export `model` with torch.export, decompose to core ATen, translate to luminal and
    compile. `options` (or keyword arguments): search_budget (candidates profiled; default
    1), runtime (a name from luminal.runtimes(); default "reference"), seed, verbose."""
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    opts.update(option_kwargs)
    if isinstance(model, torch.nn.Module):
        model.eval()
    args = tuple(example_inputs)
    exported = torch.export.export(model, args, kwargs=example_kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    exported = exported.run_decompositions(export_decompositions())
    sig = exported.graph_signature

    kinds: dict[str, tuple[str, str]] = {}
    for spec in sig.input_specs:
        name = getattr(spec.arg, "name", None)
        if spec.kind == _InputKind.USER_INPUT:
            kinds[name] = ("user", f"input_{len([k for k in kinds.values() if k[0] == 'user'])}")
        elif spec.kind == _InputKind.PARAMETER:
            kinds[name] = ("parameter", spec.target)
        elif spec.kind == _InputKind.BUFFER:
            kinds[name] = ("buffer", spec.target)
        elif spec.kind == _InputKind.CONSTANT_TENSOR:
            kinds[name] = ("constant", spec.target)
        else:
            raise UnsupportedOpError(f"luminal.torch: input '{name}' of kind {spec.kind.name} is not supported")

    user_names = [getattr(s.arg, "name", None) for s in sig.input_specs if s.kind == _InputKind.USER_INPUT]
    mutations: dict[int, tuple[str, Any]] = {}
    mutation_labels: dict[int, str] = {}
    for pos, spec in enumerate(sig.output_specs):
        if spec.kind == _OutputKind.BUFFER_MUTATION:
            mutations[pos] = ("buffer", spec.target)
            mutation_labels[pos] = spec.target
        elif spec.kind == _OutputKind.USER_INPUT_MUTATION:
            idx = user_names.index(spec.target)
            mutations[pos] = ("input", idx)
            mutation_labels[pos] = kinds[spec.target][1]
        elif spec.kind != _OutputKind.USER_OUTPUT:
            raise UnsupportedOpError(f"luminal.torch: output of kind {spec.kind.name} is not supported")

    translator = Translator(exported.graph_module, lambda node, i: kinds[node.name], mutations=mutation_labels,
                            device=_runtime_device(opts))
    translation = translator.run()
    params = _named_tensors(model, exported, translation)
    program = _Program(translation, opts)
    program.check_device(list(params.values()), "parameter or buffer")
    return CompiledModule(model, exported, program, params, mutations)


def _named_tensors(model, exported, translation: Translation) -> dict[str, torch.Tensor]:
    """Parameters, buffers and constants by name: the model's own tensors, so buffer
    write-backs land in the model as in eager mode."""
    out = {}
    for inp in translation.inputs:
        if inp.kind in ("user", "rng"):
            continue
        value = None
        if isinstance(model, torch.nn.Module):
            for getter in (model.get_parameter, model.get_buffer):
                try:
                    value = getter(inp.name)
                    break
                except (AttributeError, KeyError):
                    continue
        if value is None:
            value = exported.state_dict.get(inp.name, exported.constants.get(inp.name))
        if value is None:
            raise UnsupportedOpError(f"luminal.torch: no tensor named '{inp.name}' in the model or the export")
        out[inp.name] = value
    return out


# ---- torch.compile backend ----------------------------------------------------------------

def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None, **kwargs):
    """torch.compile(model, backend="luminal", options={"search_budget": N, "runtime": "reference"})."""
    from functorch.compile import make_boxed_func
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    opts.setdefault("fallback", "partition")
    unknown = set(opts) - {"search_budget", "runtime", "seed", "verbose", "search_time_limit_s", "fallback"}
    if unknown:
        raise ValueError(f"luminal backend: unknown option(s) {sorted(unknown)}; known: search_budget, runtime, "
                         "seed, verbose, search_time_limit_s, fallback")
    if opts["fallback"] not in ("partition", "error"):
        raise ValueError(f"luminal backend: option fallback must be 'partition' or 'error', got {opts['fallback']!r}")

    def forward_compiler(fx: torch.fx.GraphModule, inputs: list):
        unsupported = _untranslatable_nodes(fx)
        if unsupported:
            if opts["fallback"] == "error":
                raise UnsupportedOpError(f"luminal cannot translate {describe(unsupported[0])}. Supported ops are "
                                         "listed in docs/torch_ops.md.")
            return make_boxed_func(_partitioned(fx, unsupported, opts))
        program = _compile_fx(fx, opts)
        program.check_device([x for x in inputs if isinstance(x, torch.Tensor)], "input")

        def run(*args):
            return tuple(program.run(args, {}))

        run.luminal_program = program
        return make_boxed_func(run)

    def backward_compiler(fx, inputs):
        raise UnsupportedOpError("the luminal backend compiles inference only; run the model under "
                                 "torch.no_grad() or torch.inference_mode()")

    from . import _ops

    decompositions = {op: fn for op, fn in core_aten_decompositions().items() if op not in _ops.KEEP_WHOLE}
    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler,
                        decompositions=decompositions)(gm, example_inputs)


def _compile_fx(fx: torch.fx.GraphModule, opts: dict) -> _Program:
    translation = Translator(fx, lambda node, i: ("user", f"input_{i}"), device=_runtime_device(opts)).run()
    return _Program(translation, opts)


def _untranslatable_nodes(fx: torch.fx.GraphModule) -> list:
    return [n for n in fx.graph.nodes if n.op == "call_function" and not _translatable(n)]


def _translatable(node) -> bool:
    from . import _ops
    from ._translate import _SKIP

    t = node.target
    return t in _SKIP or t in _ops.TABLE or (isinstance(t, torch._ops.OpOverload) and t.overloadpacket in _ops.TABLE)


class _LuminalPartition(torch.nn.Module):
    """One translatable region of a partitioned graph, compiled by luminal."""

    def __init__(self, fx: torch.fx.GraphModule, opts: dict):
        super().__init__()
        self.program = _compile_fx(fx, opts)
        self.single = not isinstance(_output_args(fx), (tuple, list))

    def forward(self, *args):
        outs = self.program.run(args, {})
        return outs[0] if self.single else tuple(outs)


def _output_args(fx):
    return next(n for n in fx.graph.nodes if n.op == "output").args[0]


def _partitioned(fx: torch.fx.GraphModule, unsupported: list, opts: dict):
    """A graph break inside the backend: ops luminal cannot translate run in PyTorch (with a
    warning naming each), every other region is compiled by luminal."""
    import warnings

    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and _translatable(node)

    for node in unsupported:
        warnings.warn(f"luminal: {describe(node)} is not translated; it runs in PyTorch (graph break)",
                      stacklevel=2)
    partitioner = CapabilityBasedPartitioner(fx, Support(), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for node in list(fused.graph.nodes):
        if node.op == "call_module":
            sub = getattr(fused, node.target)
            setattr(fused, node.target, _LuminalPartition(sub, opts))
    fused.recompile()

    def run(*args):
        return fused(*args)

    return run
