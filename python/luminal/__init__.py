"""luminal: a search-based deep-learning compiler.

The C++ core is `luminal._luminal` (nanobind); this package re-exports it and adds the
PyTorch frontend (`luminal.torch`). See docs/PYTHON.md.
"""
from __future__ import annotations

from . import _luminal
from ._luminal import (  # noqa: F401  (the public API)
    CompileOptions,
    CompileReport,
    DimBucket,
    DType,
    Error,
    Expression,
    Graph,
    GraphTensor,
    Runtime,
    broadcast_shapes,
    dtype_bytes,
    is_float,
    parse_dtype,
    promote,
    runtimes,
    scalar_like,
)

# Absent where the package was built without models (LUMINAL_BUILD_MODELS=OFF).
models = getattr(_luminal, "models", None)

__version__ = "0.1.0"

__all__ = [
    "CompileOptions", "CompileReport", "DimBucket", "DType", "Error", "Expression", "Graph", "GraphTensor",
    "Runtime", "broadcast_shapes", "compile", "dtype_bytes", "is_float", "models", "parse_dtype", "promote",
    "runtimes", "scalar_like",
]


def compile(graph: Graph, runtime: str = "reference", options: CompileOptions | None = None) -> Runtime:
    """Lower, search and load `graph` into the runtime registered as `runtime`
    (`luminal.runtimes()` lists them). Same as `graph.compile(runtime, options)`."""
    return _luminal.compile(graph, runtime, options)
