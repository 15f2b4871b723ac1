"""The ATen op table: one entry per core ATen op (or overload packet) luminal translates.

Every translator is `fn(t, node, *args, **kwargs)` where `t` is the Translator (sizes,
graph, error context), `node` the FX node, and the arguments are already translated:
tensors are GraphTensors, sizes ints or luminal Expressions. The translator's result is
cast to the dtype PyTorch computed and its shape checked (Translator._check).
"""
from __future__ import annotations

import torch

import math

import luminal

aten = torch.ops.aten
DT = luminal.DType
GT = luminal.GraphTensor
TABLE: dict = {}


def register(*ops):
    def deco(fn):
        for op in ops:
            TABLE[op] = fn
        return fn
    return deco


def unsupported(msg: str):
    from ._translate import UnsupportedOpError

    raise UnsupportedOpError(msg)


# ---- helpers -------------------------------------------------------------------------

def out_val(node):
    return node.meta.get("val")


def out_dtype(node) -> luminal.DType:
    from ._translate import to_luminal_dtype

    val = out_val(node)
    if isinstance(val, (tuple, list)):
        val = val[0]
    return to_luminal_dtype(val.dtype)


def out_shape(t, node) -> list:
    val = out_val(node)
    if isinstance(val, (tuple, list)):
        val = val[0]
    return t.shape(val)


def is_tensor(x) -> bool:
    return isinstance(x, GT)


def as_tensor(t, x, dtype: luminal.DType) -> GT:
    """A tensor of `dtype` from a tensor or a Python scalar (a rank-0 constant)."""
    if is_tensor(x):
        return x if x.dtype == dtype else x.cast(dtype)
    if isinstance(x, luminal.Expression):
        unsupported("a symbolic size used as a tensor value")
    return t.g.constant(float(x), dtype)


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def broadcast_to(t, x: GT, shape: list) -> GT:
    return x if list(x.shape) == list(shape) else x.expand(shape)


def common_dtype(a, b) -> luminal.DType:
    """PyTorch's promotion for a comparison: tensors promote; a float scalar lifts an
    integer tensor to float32."""
    if is_tensor(a) and is_tensor(b):
        return luminal.promote(a.dtype, b.dtype)
    x, s = (a, b) if is_tensor(a) else (b, a)
    if isinstance(s, float) and not luminal.is_float(x.dtype):
        return DT.F32
    if isinstance(s, bool) and x.dtype == DT.Bool:
        return DT.Bool
    return x.dtype


# ---- elementwise arithmetic ------------------------------------------------------------

def _arith(fn):
    def translate(t, node, a, b, *, alpha=1, rounding_mode=None, **_):
        dt = out_dtype(node)  # arithmetic runs in the dtype PyTorch computes
        if rounding_mode is not None:
            dt = luminal.promote(a.dtype if is_tensor(a) else dt, b.dtype if is_tensor(b) else dt)
        x, y = as_tensor(t, a, dt), as_tensor(t, b, dt)
        if alpha != 1:
            y = y * float(alpha)
        return fn(x, y, rounding_mode)
    return translate


def _div(x, y, mode):
    if mode is None:
        return x / y
    if mode == "floor":
        return x.floor_div(y)
    if mode == "trunc":
        q = x.cast(DT.F64) / y.cast(DT.F64) if not luminal.is_float(x.dtype) else x / y
        trunc = GT.select(q.lt(0.0), q.ceil(), q.floor())
        return trunc.cast(x.dtype)
    unsupported(f"div rounding_mode '{mode}'")


register(aten.add.Tensor, aten.add.Scalar)(_arith(lambda x, y, m: x + y))
register(aten.sub.Tensor, aten.sub.Scalar)(_arith(lambda x, y, m: x - y))
register(aten.rsub.Tensor, aten.rsub.Scalar)(_arith(lambda x, y, m: y - x))
register(aten.mul.Tensor, aten.mul.Scalar)(_arith(lambda x, y, m: x * y))
register(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)(_arith(_div))
register(aten.remainder.Tensor, aten.remainder.Scalar)(_arith(lambda x, y, m: x % y))
register(aten.floor_divide.default)(_arith(lambda x, y, m: x.floor_div(y)))
register(aten.maximum.default)(_arith(lambda x, y, m: x.maximum(y)))
register(aten.minimum.default)(_arith(lambda x, y, m: x.minimum(y)))
register(aten.fmod.Tensor, aten.fmod.Scalar)(_arith(lambda x, y, m: x.fmod(y)))
register(aten.atan2.default, aten.atan2.out)(_arith(lambda x, y, m: x.atan2(y)))


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(t, node, a, b):
    dt = out_dtype(node)
    if is_tensor(a) and not is_tensor(b):
        x = as_tensor(t, a, dt)
        return x * x if b == 2 else x.pow(float(b))
    return as_tensor(t, a, dt).pow(as_tensor(t, b, dt))


# ---- comparisons and logic ------------------------------------------------------------

def _compare(method):
    def translate(t, node, a, b):
        dt = common_dtype(a, b)
        x = as_tensor(t, a, dt)
        y = b if (not is_tensor(b) and isinstance(b, (int, float))) else as_tensor(t, b, dt)
        return getattr(x, method)(y if is_tensor(y) else float(y))
    return translate


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_compare(_name))


def _logic(method):
    def translate(t, node, a, b):
        x, y = as_tensor(t, a, DT.Bool), as_tensor(t, b, DT.Bool)
        return getattr(x, method)(y)
    return translate


def _bitwise(method):
    def translate(t, node, a, b):
        dt = out_dtype(node)
        return getattr(as_tensor(t, a, dt), method)(as_tensor(t, b, dt))
    return translate


register(aten.logical_and.default)(_logic("logical_and"))
register(aten.logical_or.default)(_logic("logical_or"))
register(aten.logical_xor.default)(_logic("logical_xor"))
register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_bitwise("bitwise_and"))
register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_bitwise("bitwise_or"))
register(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_bitwise("bitwise_xor"))
register(aten.logical_not.default)(lambda t, node, x: as_tensor(t, x, DT.Bool).logical_not())
register(aten.bitwise_not.default)(lambda t, node, x: x.bitwise_not())


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(t, node, cond, a, b):
    dt = out_dtype(node)
    return GT.select(as_tensor(t, cond, DT.Bool), as_tensor(t, a, dt), as_tensor(t, b, dt))


register(aten.isnan.default)(lambda t, node, x: x.isnan())
register(aten.isinf.default)(lambda t, node, x: x.isinf())
register(aten.isfinite.default)(lambda t, node, x: x.isfinite())


@register(aten.nan_to_num.default)
def _nan_to_num(t, node, x, nan=None, posinf=None, neginf=None):
    return x.nan_to_num(0.0 if nan is None else float(nan), None if posinf is None else float(posinf),
                        None if neginf is None else float(neginf))


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(t, node, x, mask, value):
    return GT.select(as_tensor(t, mask, DT.Bool), as_tensor(t, value, x.dtype), x)


# ---- unary functions ---------------------------------------------------------------------

def _unary(method):
    def translate(t, node, x):
        dt = out_dtype(node)
        return getattr(as_tensor(t, x, dt), method)()
    return translate


for _name in ("abs", "exp", "exp2", "log", "log2", "sin", "cos", "tan", "sqrt", "rsqrt", "reciprocal", "floor",
              "ceil", "round", "erf", "tanh", "sigmoid", "relu", "sign", "expm1", "log1p", "log10", "trunc", "asin",
              "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "mish", "hardswish", "hardsigmoid", "selu"):
    register(getattr(aten, _name).default)(_unary(_name))
register(aten.neg.default)(lambda t, node, x: -x)
register(aten.silu.default)(_unary("silu"))


@register(aten.gelu.default)
def _gelu(t, node, x, approximate="none"):
    return x.gelu_tanh() if approximate == "tanh" else x.gelu()


@register(aten.leaky_relu.default)
def _leaky_relu(t, node, x, negative_slope=0.01):
    return x.leaky_relu(float(negative_slope))


@register(aten.elu.default)
def _elu(t, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    neg = (x * float(input_scale)).expm1() * float(alpha)
    return GT.select(x.gt(0.0), x, neg) * float(scale)


@register(aten.hardtanh.default)
def _hardtanh(t, node, x, min_val=-1.0, max_val=1.0):
    return x.hardtanh(float(min_val), float(max_val))


@register(aten.softplus.default)
def _softplus(t, node, x, beta=1.0, threshold=20.0):
    return x.softplus(float(beta), float(threshold))


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(t, node, x, min=None, max=None):
    dt = out_dtype(node)
    x = as_tensor(t, x, dt)
    if is_tensor(min) or is_tensor(max):
        if min is not None:
            x = x.maximum(as_tensor(t, min, dt))
        if max is not None:
            x = x.minimum(as_tensor(t, max, dt))
        return x
    return x.clamp(None if min is None else float(min), None if max is None else float(max))


register(aten.clamp_min.default)(lambda t, node, x, m: _clamp(t, node, x, min=m))
register(aten.clamp_max.default)(lambda t, node, x, m: _clamp(t, node, x, max=m))


# ---- casts, copies, identities ------------------------------------------------------------

@register(aten._to_copy.default)
def _to_copy(t, node, x, *, dtype=None, device=None, layout=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if device is not None and torch.device(device).type != t.device:
        unsupported(f"moving a tensor to device '{device}' inside the model, which is compiled for "
                    f"'{t.device}' (luminal does not move data between devices silently; put the model and its "
                    "inputs on one device)")
    return x if dtype is None else x.cast(out_dtype(node))


def _identity(t, node, x, *args, **kwargs):
    return x


register(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
         aten.contiguous.default)(_identity)


@register(aten.copy.default)
def _copy(t, node, x, src, non_blocking=False):
    return broadcast_to(t, as_tensor(t, src, x.dtype), list(x.shape))


# ---- movement --------------------------------------------------------------------------------

@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default)
def _view(t, node, x, shape):
    return x.reshape(out_shape(t, node))


@register(aten.permute.default)
def _permute(t, node, x, dims):
    return x.permute([norm_axis(d, x.rank) for d in dims])


register(aten.t.default)(lambda t, node, x: x if x.rank < 2 else x.transpose(0, 1))
register(aten.transpose.int)(lambda t, node, x, a, b: x.transpose(a, b))
register(aten.unsqueeze.default)(lambda t, node, x, d: x.unsqueeze(norm_axis(d, x.rank + 1)))


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(t, node, x, dims=None):
    if dims is None:
        dims = list(range(x.rank))
    elif isinstance(dims, int):
        dims = [dims]
    for d in sorted((norm_axis(d, x.rank) for d in dims), reverse=True):
        size = x.shape[d]
        if size.is_constant() and int(size) == 1:
            x = x.squeeze(d)
    return x


@register(aten.expand.default)
def _expand(t, node, x, size, implicit=False):
    return x.expand(out_shape(t, node))


def _slice_bound(v, size, default):
    if v is None:
        return default
    if isinstance(v, int):
        if v >= (1 << 62):
            return size
        if v < 0:
            v = v + size if not isinstance(size, luminal.Expression) else size + v
        if isinstance(size, int):
            v = min(max(v, 0), size)
        return v
    return v


@register(aten.slice.Tensor)
def _slice(t, node, x, dim=0, start=None, end=None, step=1):
    dim = norm_axis(dim, x.rank)
    size = x.shape[dim]
    size = int(size) if size.is_constant() else size
    s = _slice_bound(start, size, 0)
    e = _slice_bound(end, size, size)
    if isinstance(s, int) and isinstance(e, int):
        if e <= s:
            unsupported("an empty slice")
        return x.slice(dim, s, e, step)
    return x.slice(dim, luminal.Expression(s) if isinstance(s, int) else s,
                   luminal.Expression(e) if isinstance(e, int) else e, step)


@register(aten.select.int)
def _select(t, node, x, dim, index):
    dim = norm_axis(dim, x.rank)
    if isinstance(index, int) and index < 0:
        index += int(x.shape[dim])
    return x.slice(dim, luminal.Expression(index), luminal.Expression(index) + 1).squeeze(dim)


@register(aten.cat.default)
def _cat(t, node, tensors, dim=0):
    dt = out_dtype(node)
    # Legacy: 1-D empty tensors are skipped by torch.cat.
    xs = [as_tensor(t, x, dt) for x in tensors if not (x.rank == 1 and x.shape[0].as_constant() == 0)]
    if len(xs) == 1:
        return xs[0]
    return GT.concat(xs, norm_axis(dim, xs[0].rank))


@register(aten.stack.default)
def _stack(t, node, tensors, dim=0):
    dt = out_dtype(node)
    xs = [as_tensor(t, x, dt) for x in tensors]
    return GT.stack(xs, norm_axis(dim, xs[0].rank + 1))


@register(aten.split_with_sizes.default)
def _split_with_sizes(t, node, x, sizes, dim=0):
    return tuple(x.split(list(sizes), norm_axis(dim, x.rank)))


@register(aten.split.Tensor)
def _split(t, node, x, split_size, dim=0):
    dim = norm_axis(dim, x.rank)
    total = int(x.shape[dim])
    sizes = [min(split_size, total - i) for i in range(0, total, split_size)]
    return tuple(x.split(sizes, dim))


@register(aten.unbind.int)
def _unbind(t, node, x, dim=0):
    dim = norm_axis(dim, x.rank)
    return tuple(_select(t, node, x, dim, i) for i in range(int(x.shape[dim])))


@register(aten.flip.default)
def _flip(t, node, x, dims):
    return x.flip([norm_axis(d, x.rank) for d in dims])


@register(aten.repeat.default)
def _repeat(t, node, x, repeats):
    return x.repeat(list(repeats))


@register(aten.constant_pad_nd.default)
def _pad(t, node, x, pad, value=0.0):
    for i in range(len(pad) // 2):
        axis = x.rank - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if (isinstance(before, int) and before < 0) or (isinstance(after, int) and after < 0):
            size = x.shape[axis]
            x = x.slice(axis, luminal.Expression(max(-before, 0)), size - max(-after, 0))
            before, after = max(before, 0), max(after, 0)
        if before != 0 or after != 0:
            x = x.pad(axis, before, after, float(value))
    return x


@register(aten.tril.default)
def _tril(t, node, x, diagonal=0):
    return x.tril(diagonal)


@register(aten.triu.default)
def _triu(t, node, x, diagonal=0):
    return x.triu(diagonal)


@register(aten.sym_size.int)
def _sym_size(t, node, x, dim):
    s = x.shape[norm_axis(dim, x.rank)]
    return int(s) if s.is_constant() else s


@register(aten.sym_numel.default)
def _sym_numel(t, node, x):
    n = x.numel()
    return int(n) if n.is_constant() else n


# ---- reductions -----------------------------------------------------------------------------

def _axes(x, dims):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(x.rank))
    if isinstance(dims, int):
        dims = [dims]
    return [norm_axis(d, x.rank) for d in dims]


def _reduce(method, float_only=False):
    def translate(t, node, x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None or float_only:
            x = x.cast(out_dtype(node))
        if x.rank == 0:
            return x
        return getattr(x, method)(_axes(x, dim), keepdim)
    return translate


register(aten.sum.dim_IntList, aten.sum.default)(_reduce("sum"))
register(aten.mean.dim, aten.mean.default)(_reduce("mean", float_only=True))
register(aten.amax.default, aten.max.default)(_reduce("max"))
register(aten.amin.default, aten.min.default)(_reduce("min"))
register(aten.logsumexp.default)(_reduce("logsumexp"))


@register(aten.prod.dim_int, aten.prod.default)
def _prod(t, node, x, dim=None, keepdim=False, *, dtype=None):
    x = x.cast(out_dtype(node))
    return x.prod(_axes(x, dim), keepdim)


@register(aten.max.dim)
def _max_dim(t, node, x, dim, keepdim=False):
    d = norm_axis(dim, x.rank)
    return x.max([d], keepdim), x.argmax(d, keepdim)


@register(aten.min.dim)
def _min_dim(t, node, x, dim, keepdim=False):
    d = norm_axis(dim, x.rank)
    return x.min([d], keepdim), x.argmin(d, keepdim)


def _arg(method):
    def translate(t, node, x, dim=None, keepdim=False):
        if dim is None:
            flat = x.reshape([x.numel()])
            r = getattr(flat, method)(0, False)
            return r.reshape([1] * x.rank) if keepdim else r
        return getattr(x, method)(norm_axis(dim, x.rank), keepdim)
    return translate


register(aten.argmax.default)(_arg("argmax"))
register(aten.argmin.default)(_arg("argmin"))


def _any_all(method):
    def translate(t, node, x, dim=None, keepdim=False):
        flags = (x if x.dtype == DT.Bool else x.ne(0.0)).cast(DT.I32)
        if flags.rank == 0:
            return flags.ne(0.0)
        return getattr(flags, method)(_axes(flags, dim), keepdim).ne(0.0)
    return translate


register(aten.any.dim, aten.any.dims, aten.any.default)(_any_all("max"))
register(aten.all.dim, aten.all.dims, aten.all.default)(_any_all("min"))


@register(aten.var.correction, aten.var.dim)
def _var(t, node, x, dim=None, *, correction=None, keepdim=False, unbiased=None):
    c = 1 if correction is None else int(correction)
    return x.var(_axes(x, dim), keepdim, c)


@register(aten.std.correction)
def _std(t, node, x, dim=None, *, correction=None, keepdim=False):
    c = 1 if correction is None else int(correction)
    return x.std(_axes(x, dim), keepdim, c)


@register(aten.cumsum.default)
def _cumsum(t, node, x, dim, *, dtype=None):
    return x.cast(out_dtype(node)).cumsum(norm_axis(dim, x.rank))


@register(aten._softmax.default, aten.softmax.int)
def _softmax(t, node, x, dim, half_to_float=False):
    return x.softmax(norm_axis(dim, x.rank))


@register(aten._log_softmax.default, aten.log_softmax.int)
def _log_softmax(t, node, x, dim, half_to_float=False):
    return x.log_softmax(norm_axis(dim, x.rank))


@register(aten.sort.default, aten.sort.stable)
def _sort(t, node, x, dim=-1, descending=False, *, stable=None):
    if isinstance(dim, bool):  # sort.stable(self, *, stable, dim, descending)
        dim = -1
    return tuple(x.sort(norm_axis(dim, x.rank), descending))


@register(aten.topk.default)
def _topk(t, node, x, k, dim=-1, largest=True, sorted=True):
    return tuple(x.topk(k, norm_axis(dim, x.rank), largest))


# ---- linear algebra, convolution, normalisation ---------------------------------------------------

register(aten.mm.default, aten.bmm.default, aten.matmul.default)(lambda t, node, a, b: a.matmul(b))


@register(aten.addmm.default)
def _addmm(t, node, bias, a, b, *, beta=1, alpha=1):
    prod = a.matmul(b)
    if alpha != 1:
        prod = prod * float(alpha)
    if beta == 0:
        return prod
    return prod + (bias if beta == 1 else bias * float(beta))


@register(aten.baddbmm.default)
def _baddbmm(t, node, bias, a, b, *, beta=1, alpha=1):
    return _addmm(t, node, bias, a, b, beta=beta, alpha=alpha)


@register(aten.linear.default)
def _linear(t, node, x, w, b=None):
    return x.linear(w, b)


@register(aten.convolution.default)
def _convolution(t, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        return x.conv_transpose(w, bias, list(stride), list(padding), list(output_padding), groups, list(dilation))
    if w.rank == 5:
        return x.conv3d(w, bias, list(stride), list(padding), list(dilation), groups)
    if x.rank == 3:
        return x.conv1d(w, bias, stride[0], padding[0], dilation[0], groups)
    if x.rank == 4:
        pair = lambda v: (v[0], v[1] if len(v) > 1 else v[0])  # noqa: E731
        return x.conv2d(w, bias, pair(stride), pair(padding), pair(dilation), groups)
    unsupported(f"convolution of a rank-{x.rank} input (1-D and 2-D are supported)")


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v, v)
    return (v[0], v[1] if len(v) > 1 else v[0])


def _ints(v, dims):
    """A pooling argument as `dims` ints (an int or a list of 1 or `dims`); [] stays []."""
    if isinstance(v, int):
        return [v] * dims
    v = list(v)
    return v * dims if len(v) == 1 else v


def _max_pool(dims):
    def translate(t, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
        return x.max_pool(_ints(kernel, dims), _ints(stride, dims), _ints(padding, dims), _ints(dilation, dims),
                          bool(ceil_mode)), None
    return translate


def _avg_pool(dims):
    def translate(t, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
        if divisor_override is not None:
            unsupported(f"avg_pool{dims}d with divisor_override")
        return x.avg_pool(_ints(kernel, dims), _ints(stride, dims), _ints(padding, dims), bool(ceil_mode),
                          bool(count_include_pad))
    return translate


register(aten.max_pool2d_with_indices.default)(_max_pool(2))
register(aten.max_pool3d_with_indices.default)(_max_pool(3))
register(aten.avg_pool2d.default)(_avg_pool(2))
register(aten.avg_pool3d.default)(_avg_pool(3))
register(aten.avg_pool1d.default)(_avg_pool(1))


def _adaptive(method, with_indices):
    def translate(t, node, x, output_size):
        y = getattr(x, method)([int(o) for o in output_size])
        return (y, None) if with_indices else y
    return translate


register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default,
         aten.adaptive_avg_pool1d.default)(_adaptive("adaptive_avg_pool", False))
register(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool1d.default, aten.adaptive_max_pool3d.default)(
    _adaptive("adaptive_max_pool", True))


def _attention(t, q, k, v, attn_bias, is_causal, scale):
    """softmax(q k^T * scale + bias) v over the last two axes, as PyTorch's math path: a
    causal mask is top-left aligned (query i sees keys j <= i) and masks with -inf."""
    e = q.shape[-1]
    if scale is None:
        if not e.is_constant():
            unsupported("scaled_dot_product_attention with a symbolic head size and no scale")
        scale = 1.0 / math.sqrt(int(e))
    scores = q.matmul(k.transpose(-2, -1)) * scale
    if is_causal:
        length, keys = q.shape[-2], k.shape[-2]
        z = luminal.Expression.var("z")
        rows = t.g.iota(z, [length], DT.I64).reshape([length, 1])
        cols = t.g.iota(z, [keys], DT.I64).reshape([1, keys])
        scores = scores.masked_fill(cols.gt(rows), float("-inf"))
    if attn_bias is not None:
        if attn_bias.dtype == DT.Bool:
            unsupported("scaled_dot_product_attention's fused kernels with a boolean attn_bias")
        scores = scores + attn_bias
    return scores.softmax(scores.rank - 1).matmul(v)


# On CUDA, torch.export keeps SDPA as the fused kernel PyTorch would pick (no core ATen
# decomposition exists for these): translated to the math they compute. Only the output is
# translated; the other results (log-sum-exp, RNG state, sequence bookkeeping) are for the
# backward pass, which an inference graph never reads.
def _fused_attention(t, node, q, k, v, attn_bias, dropout_p, is_causal, scale):
    """The output, then None for each other result the op's schema declares."""
    if dropout_p:
        unsupported("scaled_dot_product_attention with dropout (training)")
    rest = len(node.target._schema.returns) - 1
    return (_attention(t, q, k, v, attn_bias, is_causal, scale),) + (None,) * rest


register(aten._scaled_dot_product_efficient_attention.default)(
    lambda t, node, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None:
    _fused_attention(t, node, q, k, v, attn_bias, dropout_p, is_causal, scale))
register(aten._scaled_dot_product_flash_attention.default)(
    lambda t, node, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None:
    _fused_attention(t, node, q, k, v, None, dropout_p, is_causal, scale))
register(aten._scaled_dot_product_cudnn_attention.default)(
    lambda t, node, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, return_debug_mask=False,
    *, scale=None: _fused_attention(t, node, q, k, v, attn_bias, dropout_p, is_causal, scale))


@register(aten.native_layer_norm.default)
def _layer_norm(t, node, x, normalized_shape, weight, bias, eps):
    return x.layer_norm(len(normalized_shape), weight, bias, float(eps)), None, None


def _channel(v, rank):
    return v.reshape([v.shape[0]] + [1] * (rank - 2))


@register(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(t, node, x, weight, bias, running_mean, running_var, momentum, eps):
    r = x.rank
    y = (x - _channel(running_mean, r)) * (_channel(running_var, r) + float(eps)).rsqrt()
    if weight is not None:
        y = y * _channel(weight, r)
    if bias is not None:
        y = y + _channel(bias, r)
    return y, None, None


@register(aten.native_group_norm.default)
def _group_norm(t, node, x, weight, bias, n, c, hw, group, eps):
    shape = list(x.shape)
    g = x.reshape([shape[0], group, -1])
    mean = g.mean([2], True)
    var = g.var([2], True, 0)
    y = ((g - mean) * (var + float(eps)).rsqrt()).reshape(shape)
    if weight is not None:
        y = y * _channel(weight, len(shape))
    if bias is not None:
        y = y + _channel(bias, len(shape))
    return y, None, None


# ---- indexing ----------------------------------------------------------------------------------

@register(aten.embedding.default)
def _embedding(t, node, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return weight.embedding(ids)


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(t, node, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    # Uniform bags only: offsets must come from arange(0, n, K) (what a 2-D input gives).
    off = node.args[2]
    step = None
    if getattr(off, "target", None) is aten.arange.start_step and off.args[0] == 0:
        step = off.args[2] if len(off.args) > 2 else off.kwargs.get("step", 1)
    if not isinstance(step, int):
        unsupported("embedding_bag with explicit offsets (only uniform bags from a 2-D input are supported)")
    if per_sample_weights is not None or include_last_offset:
        unsupported("embedding_bag with per_sample_weights or include_last_offset")
    k = step
    rows = weight.embedding(indices)
    bags = rows.reshape([indices.shape[0] // k, k, weight.shape[1]])
    out = {0: lambda: bags.sum([1]), 1: lambda: bags.mean([1]), 2: lambda: bags.max([1])}[int(mode)]()
    return out, None, None, None


@register(aten.index_select.default)
def _index_select(t, node, x, dim, index):
    return x.index_select(norm_axis(dim, x.rank), index)


@register(aten.gather.default)
def _gather(t, node, x, dim, index, sparse_grad=False):
    return x.gather(norm_axis(dim, x.rank), index)


@register(aten.scatter.src, aten.scatter.value)
def _scatter(t, node, x, dim, index, src):
    src = as_tensor(t, src, x.dtype)
    if src.rank == 0:
        src = src.expand(list(index.shape))
    return x.scatter(norm_axis(dim, x.rank), index, src)


def size_tensor(t, size) -> GT:
    """A symbolic size as a one-element I64 tensor (its value comes at execute time)."""
    return t.g.iota(luminal.Expression(size) if isinstance(size, int) else size, [1], DT.I64)


def _normalise_index(t, ix, size):
    if isinstance(size, luminal.Expression) and not size.is_constant():
        return GT.select(ix.lt(0.0), ix + size_tensor(t, size), ix)
    return GT.select(ix.lt(0.0), ix + float(int(size)), ix)


@register(aten.index.Tensor)
def _index(t, node, x, indices):
    indices = list(indices) + [None] * (x.rank - len(indices))
    positions = [i for i, ix in enumerate(indices) if ix is not None]
    if any(indices[i].dtype == DT.Bool for i in positions):
        unsupported("boolean-mask indexing (its result shape depends on the data)")
    idx = [_normalise_index(t, indices[i].cast(DT.I64), x.shape[i]) for i in positions]
    bshape = idx[0].shape
    for ix in idx[1:]:
        bshape = luminal.broadcast_shapes(bshape, ix.shape)
    idx = [broadcast_to(t, ix, bshape) for ix in idx]
    if positions != list(range(positions[0], positions[-1] + 1)):
        rest = [i for i in range(x.rank) if i not in positions]
        x = x.permute(positions + rest)
        positions = list(range(len(positions)))
    p0, k = positions[0], len(positions)
    sizes = [x.shape[p] for p in positions]
    flat = idx[-1]
    stride = luminal.Expression(1)
    for j in range(k - 2, -1, -1):
        stride = stride * sizes[j + 1]
        flat = flat + idx[j] * (float(int(stride)) if stride.is_constant() else size_tensor(t, stride))
    merged = x.shape[:p0] + [_product(sizes)] + x.shape[p0 + k:]
    xm = x.reshape(merged) if k > 1 else x
    picked = xm.index_select(p0, flat.reshape([_product(bshape)]))
    return picked.reshape(out_shape(t, node))


def _product(xs):
    out = luminal.Expression(1)
    for v in xs:
        out = out * v
    return out


def _index_copy_along(t, x, dim, index, source):
    """x with x[..., index[i], ...] = source[..., i, ...] along `dim` (index is 1-D)."""
    source = as_tensor(t, source, x.dtype)
    want = list(x.shape)
    want[dim] = index.shape[0]
    source = broadcast_to(t, source, want)
    shape = [1] * x.rank
    shape[dim] = index.shape[0]
    full = index.cast(DT.I64).reshape(shape).expand(want)
    return x.scatter(dim, full, source)


@register(aten.index_copy.default)
def _index_copy(t, node, x, dim, index, source):
    return _index_copy_along(t, x, norm_axis(dim, x.rank), index, source)


@register(aten.index_put.default)
def _index_put(t, node, x, indices, values, accumulate=False):
    positions = [i for i, ix in enumerate(indices) if ix is not None]
    if positions == list(range(len(positions))) and all(indices[i].dtype != DT.Bool for i in positions):
        # Integer index tensors on the leading dims: luminal's index_put (negative indices included).
        return x.index_put([indices[i] for i in positions], as_tensor(t, values, x.dtype), bool(accumulate))
    if accumulate:
        unsupported("index_put with accumulate=True and boolean or non-leading indices")
    if len(positions) == 1:
        (d,) = positions
        ix = indices[d]
        if ix.dtype == DT.Bool and d == 0 and ix.rank == x.rank:
            return GT.select(ix, as_tensor(t, values, x.dtype), x)
        if ix.rank == 1 and ix.dtype != DT.Bool:
            return _index_copy_along(t, x, d, _normalise_index(t, ix, x.shape[d]), values)
    unsupported("index_put with several index tensors (one 1-D index tensor or a full boolean mask is supported)")


@register(aten.slice_scatter.default)
def _slice_scatter(t, node, x, src, dim=0, start=None, end=None, step=1):
    dim = norm_axis(dim, x.rank)
    if step != 1:
        unsupported("slice_scatter with a step")
    size = x.shape[dim]
    size = int(size) if size.is_constant() else size
    s = _slice_bound(start, size, 0)
    e = _slice_bound(end, size, size)
    src = as_tensor(t, src, x.dtype)
    padded = src.pad(dim, s, luminal.Expression(size) - e)
    pos = t.g.arange(size, DT.I64)
    shape = [1] * x.rank
    shape[dim] = size
    pos = pos.reshape(shape)
    inside = pos.ge(float(s)).logical_and(pos.lt(float(e))) if isinstance(s, int) and isinstance(e, int) else None
    if inside is None:
        unsupported("slice_scatter with symbolic bounds")
    return GT.select(inside, padded, x)


@register(aten.select_scatter.default)
def _select_scatter(t, node, x, src, dim, index):
    dim = norm_axis(dim, x.rank)
    if index < 0:
        index += int(x.shape[dim])
    return _slice_scatter(t, node, x, as_tensor(t, src, x.dtype).unsqueeze(dim), dim, index, index + 1)


# ---- creation ------------------------------------------------------------------------------------

def _filled(t, node, value):
    dt = out_dtype(node)
    c = t.g.constant(float(value), dt)
    shape = out_shape(t, node)
    return c.expand(shape) if shape else c


@register(aten.full.default)
def _full(t, node, size, fill_value, **kwargs):
    return _filled(t, node, fill_value)


@register(aten.full_like.default)
def _full_like(t, node, x, fill_value, **kwargs):
    return _filled(t, node, fill_value)


register(aten.zeros_like.default, aten.empty_like.default)(lambda t, node, x, **kw: _filled(t, node, 0))
register(aten.ones_like.default)(lambda t, node, x, **kw: _filled(t, node, 1))
register(aten.zeros.default, aten.empty.memory_format, aten.new_zeros.default, aten.new_empty.default,
         aten.empty_strided.default, aten.empty_permuted.default)(lambda t, node, *a, **kw: _filled(t, node, 0))
register(aten.ones.default, aten.new_ones.default)(lambda t, node, *a, **kw: _filled(t, node, 1))
register(aten.scalar_tensor.default)(lambda t, node, v, **kw: _filled(t, node, v))


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(t, node, *args, **kwargs):
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    else:
        start, end = args[0], args[1]
        step = args[2] if len(args) > 2 else 1
    dt = out_dtype(node)
    n = out_shape(t, node)[0]
    if all(isinstance(v, int) for v in (start, step)):
        z = luminal.Expression.var("z")
        return t.g.iota(z * step + start, [n], DT.I64).cast(dt)
    if not all(isinstance(v, (int, float)) for v in (start, end, step)):
        unsupported("arange with symbolic float bounds")
    return t.g.arange(float(start), float(end), float(step), dt)


def getitem(t, node, seq, i):
    value = seq[i]
    if value is None:
        unsupported(f"output {i} of {node.args[0].target} (only the main result is translated)")
    return value


# ---- more elementwise, normalisation and resampling ops (composed from the tensor API) ----------

register(aten.fill.Scalar)(lambda t, node, x, value: _filled(t, node, value))


# ---- random numbers ------------------------------------------------------------------------
# luminal cannot replay PyTorch's generator (Philox / Mersenne Twister), so the contract is
# distribution-level: each random op draws from the same distribution as PyTorch, from
# luminal's counter-based generator keyed by a per-op seed and an offset the program draws
# from torch's default generator on every call (Translator.random_source). The same
# torch.manual_seed gives the same results; every call (and every op) draws fresh numbers.
# Anything that cannot be drawn faithfully is an UnsupportedOpError (docs/PYTHON.md).

def _no_generator(kwargs):
    if kwargs.get("generator") is not None:
        unsupported("an explicit torch.Generator (luminal draws from torch's default generator)")


def _check_random_size(shape):
    n = 1
    for s in shape:
        c = s if isinstance(s, int) else s.as_constant()
        n *= c if c is not None else 1
    # One call's counters (2 per element for normal draws) must stay below the 2^32 step
    # between calls' offsets, or two calls could repeat numbers.
    if n > 1 << 31:
        unsupported(f"a random tensor of {n} elements (at most 2^31 per op)")


def _uniform(t, node, shape, dtype=DT.F32):
    _check_random_size(shape)
    seed, offset = t.random_source()
    return t.g.rand(shape, seed, dtype, offset)


def _normal(t, node, shape, dtype=DT.F32):
    _check_random_size(shape)
    seed, offset = t.random_source()
    return t.g.randn(shape, seed, dtype, offset)


def _float_out(node):
    dt = out_dtype(node)
    if not luminal.is_float(dt):
        unsupported(f"{node.target} with integer dtype {dt}")
    return dt


@register(aten.rand.default, aten.rand_like.default)
def _rand(t, node, *args, **kwargs):
    _no_generator(kwargs)
    return _uniform(t, node, out_shape(t, node), _float_out(node))


@register(aten.randn.default, aten.randn_like.default)
def _randn(t, node, *args, **kwargs):
    _no_generator(kwargs)
    return _normal(t, node, out_shape(t, node), _float_out(node))


@register(aten.randint.default, aten.randint.low, aten.randint_like.default, aten.randint_like.low_dtype)
def _randint(t, node, *args, **kwargs):
    _no_generator(kwargs)
    if node.target in (aten.randint.default, aten.randint_like.default):
        low, high = 0, args[1] if node.target is aten.randint_like.default else args[0]
    else:
        low, high = (args[1], args[2]) if node.target is aten.randint_like.low_dtype else (args[0], args[1])
    if not all(isinstance(v, int) for v in (low, high)):
        unsupported("randint with symbolic bounds")
    span = high - low
    if span <= 0:
        unsupported(f"randint with an empty range [{low}, {high})")
    # The uniform draw carries 32 random bits: a wider range would leave values unreachable.
    if span > 1 << 32:
        unsupported(f"randint over a range of {span} values (luminal draws 32 random bits; at most 2^32 values)")
    u = _uniform(t, node, out_shape(t, node), DT.F64)
    return ((u * float(span)).floor() + float(low)).cast(out_dtype(node))


RANDPERM_MAX = 4096


@register(aten.randperm.default)
def _randperm(t, node, n, **kwargs):
    _no_generator(kwargs)
    if not isinstance(n, int):
        unsupported("randperm with a symbolic size")
    if n > RANDPERM_MAX:  # the tensor API's sort compares all pairs: n^2 memory
        unsupported(f"randperm({n}): at most {RANDPERM_MAX} elements (luminal's argsort compares all pairs)")
    # A uniformly random permutation: the stable argsort of n random keys. Two 32-bit draws
    # make each key (53 bits survive in F64), so ties, which would favour the identity
    # order, have probability below n^2 / 2^54.
    high = _uniform(t, node, [n], DT.F64)
    low = _uniform(t, node, [n], DT.F64)
    return (high + low * 2.0 ** -32).argsort(0).cast(out_dtype(node))


@register(aten.bernoulli.default, aten.bernoulli.p)
def _bernoulli(t, node, x, p=None, **kwargs):
    _no_generator(kwargs)
    if p is None and not luminal.is_float(x.dtype):
        unsupported(f"bernoulli of an integer tensor ({x.dtype})")
    prob = x.cast(DT.F64) if p is None else float(p)
    u = _uniform(t, node, list(x.shape), DT.F64)
    return (u < prob).cast(out_dtype(node))


@register(aten.uniform.default)
def _uniform_op(t, node, x, low=0.0, high=1.0, **kwargs):
    _no_generator(kwargs)
    u = _uniform(t, node, list(x.shape), DT.F64)
    return (u * (float(high) - float(low)) + float(low)).cast(_float_out(node))


@register(aten.normal_functional.default)
def _normal_functional(t, node, x, mean=0.0, std=1.0, **kwargs):
    _no_generator(kwargs)
    return (_normal(t, node, list(x.shape), DT.F64) * float(std) + float(mean)).cast(_float_out(node))


@register(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, aten.normal.float_float)
def _normal_op(t, node, mean, std=1.0, *rest, **kwargs):
    _no_generator(kwargs)
    dt = _float_out(node)
    z = _normal(t, node, out_shape(t, node), DT.F64)
    return (z * as_tensor(t, std, DT.F64) + as_tensor(t, mean, DT.F64)).cast(dt)


@register(aten.exponential.default)
def _exponential(t, node, x, lambd=1.0, **kwargs):
    _no_generator(kwargs)
    u = _uniform(t, node, list(x.shape), DT.F64)
    return ((1.0 - u).log() * (-1.0 / float(lambd))).cast(_float_out(node))


def _dropout_train(t, node, x, p):
    """Training-mode dropout: zero with probability p, scale the rest by 1/(1-p); the mask."""
    p = float(p)
    if p >= 1:
        keep = t.g.constant(0.0, DT.Bool).expand(list(x.shape)) if x.rank else t.g.constant(0.0, DT.Bool)
        return x * 0.0, keep
    keep = _uniform(t, node, list(x.shape), DT.F64) >= p
    scaled = x.cast(DT.F64) * (1.0 / (1.0 - p))
    return GT.select(keep, scaled, scaled * 0.0).cast(x.dtype), keep


@register(aten.native_dropout.default)
def _native_dropout(t, node, x, p, train):
    if not train or float(p) == 0:
        return x, None
    return _dropout_train(t, node, x, p)


@register(aten.dropout.default)
def _dropout(t, node, x, p, train):
    return _dropout_train(t, node, x, p)[0] if train and float(p) != 0 else x


@register(aten._native_batch_norm_legit.default, aten._native_batch_norm_legit.no_stats)
def _batch_norm_legit(t, node, x, weight, bias, *rest):
    # (running_mean, running_var, training, momentum, eps) or, without stats, (training, momentum, eps).
    if len(rest) == 5:
        running_mean, running_var, training, _, eps = rest
    else:
        running_mean = running_var = None
        training, _, eps = rest
    if not training and running_mean is not None:
        return _batch_norm(t, node, x, weight, bias, running_mean, running_var, None, eps)
    axes = [0] + list(range(2, x.rank))
    mean = x.mean(axes, True)
    var = x.var(axes, True, 0)
    y = (x - mean) * (var + float(eps)).rsqrt()
    if weight is not None:
        y = y * _channel(weight, x.rank)
    if bias is not None:
        y = y + _channel(bias, x.rank)
    return y, None, None, None, None


def _pad_mode(mode):
    def translate(t, node, x, padding):
        k = len(padding) // 2
        for i in range(k):
            axis = x.rank - 1 - i
            before, after = padding[2 * i], padding[2 * i + 1]
            size = int(x.shape[axis])
            parts = []
            if before:
                parts.append(x.slice(axis, 1, before + 1).flip([axis]) if mode == "reflect"
                             else GT.concat([x.slice(axis, 0, 1)] * before, axis))
            parts.append(x)
            if after:
                parts.append(x.slice(axis, size - after - 1, size - 1).flip([axis]) if mode == "reflect"
                             else GT.concat([x.slice(axis, size - 1, size)] * after, axis))
            x = GT.concat(parts, axis) if len(parts) > 1 else x
        return x
    return translate


register(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)(
    _pad_mode("reflect"))
register(aten.replication_pad2d.default, aten.replication_pad3d.default)(_pad_mode("replicate"))


def _source_index(t, out_size: int, in_size: int, scale, linear: bool, align_corners: bool) -> GT:
    """PyTorch's source coordinate of each output position along one axis (float32)."""
    dst = t.g.iota(luminal.Expression.var("z"), [out_size], DT.I64).cast(DT.F32)
    if align_corners:
        s = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        return dst * s
    s = (1.0 / scale) if scale else in_size / out_size
    if not linear:
        return dst * s
    return ((dst + 0.5) * s - 0.5).maximum(0.0)


def _resample(t, node, x, scales, linear, align_corners):
    out_sizes = [int(s) for s in out_shape(t, node)[2:]]
    for i, out_size in enumerate(out_sizes):
        axis = 2 + i
        in_size = int(x.shape[axis])
        scale = scales[i] if scales else None
        src = _source_index(t, out_size, in_size, scale, linear, align_corners)
        i0 = src.floor().minimum(float(in_size - 1))
        lo = x.index_select(axis, i0.cast(DT.I64))
        if not linear:
            x = lo
            continue
        i1 = (i0 + 1.0).minimum(float(in_size - 1))
        hi = x.index_select(axis, i1.cast(DT.I64))
        shape = [1] * x.rank
        shape[axis] = out_size
        w = (src - i0).reshape(shape).cast(x.dtype)
        x = lo * (1.0 - w) + hi * w
    return x


@register(aten.upsample_nearest2d.vec, aten.upsample_nearest1d.vec)
def _upsample_nearest(t, node, x, output_size, scale_factors):
    return _resample(t, node, x, scale_factors, False, False)


@register(aten.upsample_bilinear2d.vec, aten.upsample_linear1d.vec)
def _upsample_linear(t, node, x, output_size, align_corners, scale_factors):
    return _resample(t, node, x, scale_factors, True, align_corners)


@register(aten.scatter_add.default)
def _scatter_add(t, node, x, dim, index, src):
    return x.scatter_add(norm_axis(dim, x.rank), index, as_tensor(t, src, x.dtype))


@register(aten.scatter_reduce.two)
def _scatter_reduce(t, node, x, dim, index, src, reduce, *, include_self=True):
    if reduce != "sum":
        unsupported(f"scatter_reduce with reduce='{reduce}' (only 'sum')")
    dim = norm_axis(dim, x.rank)
    src = as_tensor(t, src, x.dtype)
    if not include_self:  # the positions written start from 0
        x = x.scatter(dim, index, t.g.constant(0.0, x.dtype).expand(list(index.shape)))
    return x.scatter_add(dim, index, src)


@register(aten.diagonal.default)
def _diagonal(t, node, x, offset=0, dim1=0, dim2=1):
    return x.diagonal(offset, dim1, dim2)


@register(aten.cumprod.default)
def _cumprod(t, node, x, dim, *, dtype=None):
    return x.cumprod(norm_axis(dim, x.rank))


@register(aten.cummax.default, aten.cummin.default)
def _cumextreme(t, node, x, dim):
    fn = x.cummax if node.target is aten.cummax.default else x.cummin
    return tuple(fn(norm_axis(dim, x.rank)))


register(aten.logcumsumexp.default)(lambda t, node, x, dim: x.logcumsumexp(norm_axis(dim, x.rank)))


@register(aten.median.dim)
def _median_dim(t, node, x, dim, keepdim=False):
    return tuple(x.median(norm_axis(dim, x.rank), bool(keepdim)))


@register(aten.kthvalue.default)
def _kthvalue(t, node, x, k, dim=-1, keepdim=False):
    return tuple(x.kthvalue(int(k), norm_axis(dim, x.rank), bool(keepdim)))


@register(aten.median.default)
def _median_all(t, node, x):
    return x.reshape([x.numel()]).median(0)[0]


register(aten.pixel_shuffle.default)(lambda t, node, x, r: x.pixel_shuffle(int(r)))
register(aten.pixel_unshuffle.default)(lambda t, node, x, r: x.pixel_unshuffle(int(r)))


@register(aten.roll.default)
def _roll(t, node, x, shifts, dims=()):
    return x.roll([int(s) for s in shifts], [norm_axis(d, x.rank) for d in dims])


@register(aten.im2col.default)
def _im2col(t, node, x, kernel_size, dilation, padding, stride):
    return x.im2col(_pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride))


@register(aten._cdist_forward.default)
def _cdist(t, node, x1, x2, p, compute_mode=None):
    # Direct differences (torch may use a matmul expansion for p = 2 on large inputs; the
    # direct form is the more accurate of the two).
    return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(float(p), [x1.rank], False)


@register(aten.masked_scatter.default)
def _masked_scatter(t, node, x, mask, source):
    """x where mask is false; the true positions take source's elements in row-major order."""
    shape = out_shape(t, node)
    if source.numel().as_constant() == 0:  # then the mask holds no true element (torch checks)
        return x
    mask = broadcast_to(t, mask, shape)
    flat_mask = mask.reshape([-1])
    # Position of each true element among the true ones; false positions read element 0.
    rank = (flat_mask.cast(DT.I64).cumsum(0) - 1).maximum(0)
    taken = source.reshape([-1]).index_select(0, rank).reshape(shape)
    return GT.select(mask, taken.cast(x.dtype), broadcast_to(t, x, shape))


def _meta_int(node, what):
    val = out_val(node)
    if isinstance(val, (int, bool)):
        return val
    if isinstance(val, (list, tuple)) and all(isinstance(v, int) for v in val):
        return tuple(val)
    unsupported(f"{what} that is not static ({val})")


register(aten.sym_stride.int, aten.sym_stride.default)(lambda t, node, x, *a: _meta_int(node, "a stride"))
register(aten.sym_storage_offset.default)(lambda t, node, x: _meta_int(node, "a storage offset"))
register(aten.sym_is_contiguous.default)(lambda t, node, x, *a: _meta_int(node, "a contiguity test"))


@register(aten.as_strided.default)
def _as_strided(t, node, x, size, stride, storage_offset=None):
    """A strided window onto x's storage. luminal tensors are logical, so this is only
    faithful when PyTorch's x is contiguous from storage offset 0: then storage order is
    x's row-major order, and the window is a gather at offset + sum(i_k * stride_k)."""
    src = out_val(node.args[0])
    if not (isinstance(src, torch.Tensor) and src.is_contiguous() and src.storage_offset() == 0):
        unsupported("as_strided of a tensor that is not contiguous from storage offset 0 (its storage layout "
                    "is not luminal's)")
    if not all(isinstance(v, int) for v in list(size) + list(stride) + [storage_offset or 0]):
        unsupported("as_strided with symbolic sizes or strides")
    z = luminal.Expression.var("z")
    flat = luminal.Expression(int(storage_offset or 0))
    inner = 1
    for n, st in reversed(list(zip(size, stride))):
        flat = flat + (z // inner) % n * st
        inner *= n
    numel = inner
    if numel == 0:
        return t.g.constant(0.0, x.dtype).expand(list(size))
    index = t.g.iota(flat, [numel], DT.I64)
    return x.reshape([-1]).index_select(0, index).reshape(list(size))


# Ops translated whole although PyTorch's decomposition tables would split them: their
# decompositions (index_put with accumulation over non-leading index tensors) are slower to
# run and harder to translate than the one tensor-API op each maps to.
KEEP_WHOLE = (aten.col2im.default, aten.im2col.default)


@register(aten.col2im.default)
def _col2im(t, node, x, output_size, kernel_size, dilation, padding, stride):
    return x.col2im(_pair(output_size), _pair(kernel_size), _pair(dilation), _pair(padding), _pair(stride))


@register(aten.linalg_vector_norm.default)
def _vector_norm(t, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    axes = None if dim is None else [norm_axis(d, x.rank) for d in ([dim] if isinstance(dim, int) else dim)]
    return x.norm(float(ord), axes, bool(keepdim))


register(aten.glu.default)(lambda t, node, x, dim=-1: x.glu(dim))
register(aten.celu.default)(lambda t, node, x, alpha=1.0: x.celu(float(alpha)))
