"""luminal.torch.compile (the torch.export path): dynamic dims, buffer mutations,
pass-through and aliased outputs, errors, and per-op checks against eager PyTorch."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
import luminal  # noqa: E402
import luminal.torch as lt  # noqa: E402
from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402


def close(a, b, tol=1e-5):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    if a.dtype == torch.bool or not a.dtype.is_floating_point:
        assert torch.equal(a, b), (a, b)
        return
    torch.testing.assert_close(a.double(), b.double(), atol=tol, rtol=tol, equal_nan=True)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1) @ v


def test_dynamic_sequence_length_does_not_recompile():
    torch.manual_seed(0)
    model = Attention().eval()
    seq = Dim("seq", min=2, max=32)
    compiled = lt.compile(model, (torch.randn(1, 5, 8),), dynamic_shapes=({1: seq},))
    before = lt.stats["compiles"]
    for n in (2, 5, 9, 31):
        x = torch.randn(1, n, 8)
        with torch.no_grad():
            close(compiled(x), model(x))
    assert lt.stats["compiles"] == before
    (dim,) = compiled.program.t.dims.values()  # one luminal dim, bucketed over the exported range
    assert dim[1:] == (2, 32)
    assert compiled.runtime.report.plans == 1


class StaticCacheDecoder(nn.Module):
    """One attention layer with a static KV cache written in place with index_copy_."""

    def __init__(self, max_seq=16, dim=8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.register_buffer("k_cache", torch.zeros(max_seq, dim))
        self.register_buffer("v_cache", torch.zeros(max_seq, dim))
        self.max_seq = max_seq

    def forward(self, x, pos):
        self.k_cache.index_copy_(0, pos, self.k(x))
        self.v_cache.index_copy_(0, pos, self.v(x))
        scores = self.q(x) @ self.k_cache.t()
        visible = torch.arange(self.max_seq) <= pos.max()
        scores = scores.masked_fill(~visible, float("-inf"))
        return torch.softmax(scores, dim=-1) @ self.v_cache


def test_buffer_mutations_are_written_back():
    torch.manual_seed(0)
    model = StaticCacheDecoder().eval()
    eager = StaticCacheDecoder().eval()
    eager.load_state_dict(model.state_dict())
    compiled = lt.compile(model, (torch.randn(1, 8), torch.tensor([0])))
    model.k_cache.zero_()
    model.v_cache.zero_()
    for step in range(5):
        x, pos = torch.randn(1, 8), torch.tensor([step])
        out = compiled(x, pos)
        with torch.no_grad():
            ref = eager(x, pos)
        close(out, ref)
        close(model.k_cache, eager.k_cache)  # the model's own buffer holds the new rows
    # A change made to the buffer from PyTorch reaches the runtime (version counter).
    model.k_cache.zero_()
    eager.k_cache.zero_()
    x, pos = torch.randn(1, 8), torch.tensor([5])
    with torch.no_grad():
        close(compiled(x, pos), eager(x, pos))


class PassThrough(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x, y):
        z = x * 2
        return x, z, z, y.view(-1), self.w


def test_pass_through_and_aliased_outputs_survive():
    model = PassThrough().eval()
    x, y = torch.randn(3), torch.randn(2, 3)
    compiled = lt.compile(model, (x, y))
    a, z1, z2, yv, w = compiled(x, y)
    assert a is x
    close(z1, x * 2)
    close(z2, x * 2)
    close(yv, y.view(-1))
    assert w is model.w  # a parameter passed through is the model's own tensor


class UsesUnsupported(nn.Module):
    def forward(self, x):
        y = x + 1
        return torch.linalg.qr(y).Q  # an op luminal does not translate


def test_unsupported_op_names_the_op_and_the_model_line():
    with pytest.raises(lt.UnsupportedOpError) as e:
        lt.compile(UsesUnsupported(), (torch.randn(3, 3),))
    msg = str(e.value)
    assert "aten.linalg_qr" in msg or "qr" in msg
    assert "test_torch_export.py" in msg and "torch.linalg.qr(y)" in msg


def test_tensor_on_another_device_is_an_error_not_a_move():
    compiled = lt.compile(nn.Linear(3, 2).eval(), (torch.randn(1, 3),))
    with pytest.raises(RuntimeError, match="never moves data between devices"):
        compiled(torch.randn(1, 3, device="meta"))


def test_input_of_another_dtype_or_static_size_is_an_error():
    compiled = lt.compile(nn.Linear(3, 2).eval(), (torch.randn(4, 3),))
    with pytest.raises(ValueError, match=r"dtype torch.float64.*compiled for torch.float32"):
        compiled(torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"shape \[5, 3\]"):
        compiled(torch.randn(5, 3))


def test_wrong_input_count_is_an_error():
    compiled = lt.compile(nn.Linear(3, 2).eval(), (torch.randn(1, 3),))
    with pytest.raises(TypeError, match="takes 1 inputs"):
        compiled(torch.randn(1, 3), torch.randn(1, 3))


# ---- per-op checks: each translated op against eager, varied data and dtypes ------------------

def _data(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 3
        if x.numel() > 3:
            x.view(-1)[0], x.view(-1)[1], x.view(-1)[2] = -0.0, 0.5, -2.5
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


OPS = {
    "add": (lambda a, b: a + b * 2, [(3, 4), (4,)]),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=3), [(3, 4), (3, 4)]),
    "mul_scalar": (lambda a: a * 1.5 - 2, [(2, 5)]),
    "div": (lambda a, b: a / (b.abs() + 1), [(3, 4), (3, 4)]),
    "div_floor": (lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"), [(3, 4), (3, 4)]),
    "div_trunc": (lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="trunc"), [(3, 4), (3, 4)]),
    "remainder": (lambda a: torch.remainder(a, 1.5), [(3, 5)]),
    "fmod": (lambda a: torch.fmod(a, 1.5), [(3, 5)]),
    "pow": (lambda a: a.abs().pow(1.7) + a.pow(2), [(3, 4)]),
    "minmax": (lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), [(3, 4), (1, 4)]),
    "compare": (lambda a, b: (a < b) | (a >= 1.0) & (b != a), [(3, 4), (3, 4)]),
    "where": (lambda a, b: torch.where(a > 0, a, b), [(3, 4), (4,)]),
    "unary": (lambda a: a.exp().log1p() + a.sin() * a.cos() + a.tanh() + a.sigmoid() + a.abs().sqrt()
              + a.abs().add(1).rsqrt() + a.floor() + a.ceil() + a.round() + a.sign() + torch.erf(a), [(4, 5)]),
    "activations": (lambda a: nn.functional.gelu(a) + nn.functional.gelu(a, approximate="tanh")
                    + nn.functional.silu(a) + nn.functional.relu(a) + nn.functional.leaky_relu(a, 0.2)
                    + nn.functional.elu(a) + nn.functional.hardswish(a) + nn.functional.hardsigmoid(a)
                    + nn.functional.softplus(a) + nn.functional.hardtanh(a), [(4, 5)]),
    "clamp": (lambda a: a.clamp(-1, 2) + a.clamp(min=0.5), [(4, 5)]),
    "reductions": (lambda a: a.sum(1) + a.mean(1) + a.amax(1) + a.amin(1) + a.var(1) + a.std(1)
                   + torch.logsumexp(a, 1), [(3, 6)]),
    "max_dim": (lambda a: a.max(dim=0).values + a.min(dim=0).values, [(4, 3)]),
    "argmax": (lambda a: a.argmax(1) + a.argmin(0, keepdim=True), [(4, 4)]),
    "any_all": (lambda a: a.gt(0).any(1) | a.lt(-1).all(1), [(3, 4)]),
    "prod_cumsum": (lambda a: a.prod(1) + a.cumsum(1).sum(1), [(3, 4)]),
    "softmax": (lambda a: a.softmax(-1) + a.log_softmax(0), [(3, 5)]),
    "matmul": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)]),
    "bmm": (lambda a, b: torch.bmm(a, b), [(2, 3, 4), (2, 4, 2)]),
    "movement": (lambda a: a.permute(2, 0, 1).reshape(4, 6).t().unsqueeze(0).flip(1).squeeze(0)
                 .transpose(0, 1)[1:, ::2], [(2, 3, 4)]),
    "non_contiguous_input": (lambda a: a.t() * 2, [(3, 5)]),
    "cat_split": (lambda a, b: torch.cat(torch.cat([a, b], 1).split([2, 5], 1)[::-1], 1), [(2, 3), (2, 4)]),
    "stack_unbind": (lambda a: torch.stack(a.unbind(0), 1), [(3, 4)]),
    "expand_repeat": (lambda a: a.expand(3, 4, 2) + a.repeat(3, 1, 1), [(1, 4, 2)]),
    "pad": (lambda a: nn.functional.pad(a, (1, 2, 0, 1), value=-1.0), [(2, 3)]),
    "select_slice": (lambda a: a[1] + a[-1] + a[:, 1:3].sum(1, keepdim=True), [(3, 4)]),
    "index_tensor": (lambda a: a[torch.tensor([2, 0, 2]), torch.tensor([1, -1, 0])] + a[:, torch.tensor([3, 0])].sum(),
                     [(3, 4)]),
    "gather": (lambda a: a.gather(1, torch.tensor([[0, 3], [1, 1], [2, 0]])), [(3, 4)]),
    "scatter": (lambda a, b: a.scatter(1, torch.tensor([[0, 3], [1, 2], [2, 0]]), b), [(3, 4), (3, 2)]),
    "index_select": (lambda a: a.index_select(0, torch.tensor([2, 0])), [(3, 4)]),
    "embedding": (lambda w: nn.functional.embedding(torch.tensor([[1, 3], [0, 4]]), w), [(5, 3)]),
    "layer_norm": (lambda a, w: nn.functional.layer_norm(a, (4,), w, w * 0.5), [(3, 4), (4,)]),
    "conv_pool": (lambda a, w: nn.functional.avg_pool2d(nn.functional.max_pool2d(
        nn.functional.conv2d(a, w, padding=1, stride=1), 2), 2, 1), [(1, 2, 8, 8), (3, 2, 3, 3)]),
    "conv1d_groups": (lambda a, w: nn.functional.conv1d(a, w, groups=2, padding=1), [(1, 4, 7), (4, 2, 3)]),
    "adaptive_pool": (lambda a: nn.functional.adaptive_avg_pool2d(a, 1) + nn.functional.adaptive_avg_pool2d(a, 2)
                      .mean(), [(1, 2, 4, 4)]),
    "creation": (lambda a: a + torch.arange(4) * 0.5 + torch.full((3, 4), 2.0) + torch.zeros_like(a)
                 + torch.ones(4), [(3, 4)]),
    "tril": (lambda a: a.tril() - a.triu(1), [(4, 4)]),
    "sort_topk": (lambda a: a.sort(1).values + a.topk(4, 1).values, [(3, 4)]),
    "masked_fill": (lambda a: a.masked_fill(a > 1, -3.0), [(3, 4)]),
    "index_put": (lambda a, b: a.index_put((torch.tensor([2, 0]),), b), [(3, 4), (2, 4)]),
    "slice_scatter": (lambda a, b: a.slice_scatter(b, 1, 1, 3), [(3, 4), (3, 2)]),
    "select_scatter": (lambda a, b: a.select_scatter(b, 0, -1), [(3, 4), (4,)]),
    "index_copy": (lambda a, b: a.index_copy(1, torch.tensor([3, 0]), b), [(3, 4), (3, 2)]),
    "hyperbolic": (lambda a: a.sinh() + a.cosh() + a.asinh() + (a.abs() + 1).acosh() + (a / 10).atanh(), [(3, 4)]),
    "more_unary": (lambda a: a.expm1() + a.abs().log1p() + a.abs().add(0.1).log10() + a.trunc()
                   + a.isnan().float() + torch.isinf(a / 0.0).float(), [(3, 4)]),
    "logic": (lambda a, b: (a > 0) ^ (b > 0) | ~(a < b) & (b > -1), [(3, 4), (3, 4)]),
    "reflect_replicate_pad": (lambda a: nn.functional.pad(a, (2, 1, 1, 2), mode="reflect")
                              + nn.functional.pad(a, (2, 1, 1, 2), mode="replicate"), [(1, 2, 4, 5)]),
    "reflect_pad1d": (lambda a: nn.functional.pad(a, (3, 2), mode="reflect"), [(1, 2, 6)]),
    "upsample_nearest": (lambda a: nn.functional.interpolate(a, scale_factor=2, mode="nearest")
                         .sum() + nn.functional.interpolate(a, size=(5, 7), mode="nearest"), [(1, 2, 3, 4)]),
    "upsample_bilinear": (lambda a: nn.functional.interpolate(a, size=(5, 7), mode="bilinear")
                          + nn.functional.interpolate(a, size=(5, 7), mode="bilinear", align_corners=True),
                          [(1, 2, 3, 4)]),
    "upsample_bilinear_scale": (lambda a: nn.functional.interpolate(a, scale_factor=1.5, mode="bilinear"),
                                [(1, 2, 4, 4)]),
    "scatter_add": (lambda a, b: a.scatter_add(0, torch.tensor([[0, 2, 1, 0], [0, 0, 2, 1]]), b),
                    [(3, 4), (2, 4)]),
    "diagonal": (lambda a: a.diagonal() + a.diagonal(1)[:2].sum() + a.diagonal(-1, 0, 1)[:2].sum(), [(3, 4)]),
    "batch_norm_train_stats": (lambda a: nn.functional.batch_norm(a, None, None, training=True), [(4, 3, 2, 2)]),
    "group_norm": (lambda a, w: nn.functional.group_norm(a, 2, w, w + 1), [(2, 4, 3, 3), (4,)]),
    "embedding_bag_modes": (lambda w: nn.functional.embedding_bag(torch.tensor([[1, 3], [0, 4]]), w, mode="mean")
                            + nn.functional.embedding_bag(torch.tensor([[1, 3], [0, 4]]), w, mode="max"), [(5, 3)]),
    "int_arith": (lambda a: (a.long() * 3 - 7) // 2 + (a.long() % 3) + a.long().sum(0), [(3, 4)]),
    "argmax_flat_var0": (lambda a: a.argmax().float() + a.var(1, correction=0).sum() + a.sum(1, dtype=torch.float64)
                         .float(), [(3, 4)]),
    "sort_desc_topk_smallest": (lambda a: a.sort(0, descending=True).values[0] + a.topk(2, 0, largest=False).values[1],
                                [(3, 4)]),
    "pool1d": (lambda a: nn.functional.avg_pool1d(a, 3, 2, 1) .sum() + nn.functional.adaptive_avg_pool1d(a, 2),
               [(1, 2, 8)]),
    "dropout_eval": (lambda a: nn.functional.dropout(a, 0.5, training=False) * 2, [(3, 4)]),
    # issue 11 item 5: the ops PyTorch users reach for, through their ATen translations.
    "inverse_trig": (lambda a, b: (a / 10).asin() + (a / 10).acos() + a.atan() + torch.atan2(a, b), [(3, 4), (3, 4)]),
    "int_bitwise": (lambda a, b: (a.long() & b.long()) | (a.long() ^ 5) + ~b.long(), [(3, 4), (3, 4)]),
    "nan_to_num_isfinite": (lambda a: torch.nan_to_num(a / 0.0, 1.0, 2.0, -3.0) + torch.isfinite(a / 0.0).float(),
                            [(3, 4)]),
    "more_activations": (lambda a: nn.functional.mish(a) + nn.functional.selu(a) + nn.functional.celu(a, 0.5)
                         + nn.functional.glu(a, -1).sum() + nn.functional.logsigmoid(a).sum(), [(3, 4)]),
    "scans": (lambda a: a.cumprod(1) + a.cummax(1).values + a.cummin(0).values + a.logcumsumexp(1), [(3, 4)]),
    "order_statistics": (lambda a: a.median(1).values + a.kthvalue(2, 1).values + a.median(), [(3, 5)]),
    "vector_norm": (lambda a: torch.linalg.vector_norm(a, dim=1) + torch.linalg.vector_norm(a, 1.0)
                    + nn.functional.normalize(a, dim=1).sum(1), [(3, 4)]),
    "conv_transpose": (lambda a, w: nn.functional.conv_transpose2d(a, w, stride=2, padding=1, output_padding=1),
                       [(1, 2, 3, 4), (2, 3, 3, 3)]),
    "conv_transpose1d_groups": (lambda a, w: nn.functional.conv_transpose1d(a, w, stride=2, groups=2),
                                [(1, 4, 5), (4, 1, 3)]),
    "conv3d_pool3d": (lambda a, w: nn.functional.max_pool3d(nn.functional.conv3d(a, w, padding=1), 2)
                      + nn.functional.avg_pool3d(nn.functional.conv3d(a, w, padding=1), 2), [(1, 2, 4, 4, 4), (2, 2, 3, 3, 3)]),
    "pool_ceil_mode": (lambda a: nn.functional.max_pool2d(a, 2, 2, ceil_mode=True)
                       + nn.functional.avg_pool2d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False), [(1, 2, 5, 5)]),
    "adaptive_uneven": (lambda a: nn.functional.adaptive_avg_pool2d(a, (3, 2)) + nn.functional.adaptive_max_pool2d(a, (3, 2)),
                        [(1, 2, 7, 5)]),
    "pixel_shuffle_roll": (lambda a: nn.functional.pixel_unshuffle(nn.functional.pixel_shuffle(a, 2), 2).roll(1, 2),
                           [(1, 8, 2, 3)]),
    "im2col": (lambda a: nn.functional.unfold(a, 2, padding=1, stride=2), [(1, 2, 4, 5)]),
    "cdist": (lambda a, b: torch.cdist(a, b) + torch.cdist(a, b, p=1.0) + torch.cdist(a, b, p=float("inf"))
              + torch.cdist(a, b, p=0.0), [(2, 4, 3), (2, 5, 3)]),
    "masked_scatter": (lambda a, b: a.masked_scatter(a > 0, b) + a.masked_scatter(a[0] < 0.5, b), [(3, 4), (13,)]),
    "as_strided": (lambda a: (a * 2).as_strided((3, 2), (2, 3), 1) + (a - 1).as_strided((3, 2), (0, 5), 2), [(4, 4)]),
    "fold": (lambda a: nn.functional.fold(a, (5, 6), 2), [(1, 8, 20)]),
    "fold_mixed": (lambda a: nn.functional.fold(a, (7, 8), (3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1)),
                   [(2, 18, 24)]),
    "fold_unfold_roundtrip": (lambda a: nn.functional.fold(nn.functional.unfold(a, 3, padding=1, stride=2), (5, 7), 3,
                                                           padding=1, stride=2), [(1, 2, 5, 7)]),
    "index_put_accumulate": (lambda a, b: a.index_put((torch.tensor([2, 0, 2]), torch.tensor([1, 3, 1])), b,
                                                      accumulate=True), [(3, 4), (3,)]),
    "scatter_reduce_sum": (lambda a, b: a.scatter_reduce(1, torch.tensor([[0, 0], [3, 1], [2, 2]]), b, "sum",
                                                         include_self=False), [(3, 4), (3, 2)]),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_eager(name):
    fn, shapes = OPS[name]
    inputs = tuple(_data(s, seed=i) for i, s in enumerate(shapes))
    if name == "non_contiguous_input":
        inputs = (inputs[0].t().contiguous().t(),)
    compiled = lt.compile(Fn(fn), inputs)
    with torch.no_grad():
        close(compiled(*inputs), fn(*inputs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int64])
def test_elementwise_across_dtypes(dtype):
    fn = lambda a, b: (a + b) * a - torch.maximum(a, b) + (a > b).to(dtype)  # noqa: E731
    inputs = (_data((3, 4), dtype, 0), _data((3, 4), dtype, 1))
    compiled = lt.compile(Fn(fn), inputs)
    close(compiled(*inputs), fn(*inputs), tol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5)


def test_search_budget_and_runtime_options():
    model = nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    compiled = lt.compile(model, (x,), options={"search_budget": 3, "runtime": "reference"})
    with torch.no_grad():
        close(compiled(x), model(x))
    with pytest.raises(ValueError, match="unknown runtime 'nope'"):
        lt.compile(model, (x,), runtime="nope")
    assert "reference" in [r["name"] for r in luminal.runtimes()]


class WritesItsInput(nn.Module):
    def forward(self, cache, rows, pos):
        cache.index_copy_(0, pos, rows * 2)
        return cache.sum(0)


def test_user_input_mutations_are_copied_back():
    cache, rows, pos = torch.zeros(6, 3), _data((2, 3)), torch.tensor([4, 1])
    compiled = lt.compile(WritesItsInput(), (cache.clone(), rows, pos))
    eager_cache = cache.clone()
    out = compiled(cache, rows, pos)
    close(out, WritesItsInput()(eager_cache, rows, pos))
    close(cache, eager_cache)
    # The next call sees the caller's updated tensor (its version moved).
    rows2, pos2 = _data((2, 3), seed=5), torch.tensor([0, 4])
    close(compiled(cache, rows2, pos2), WritesItsInput()(eager_cache, rows2, pos2))
    close(cache, eager_cache)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_nn_ops_in_low_and_high_precision(dtype):
    fn = lambda a, b, w: nn.functional.layer_norm(a @ b, (5,), w, None).softmax(-1).sum(0)  # noqa: E731
    inputs = (_data((3, 4), dtype, 0), _data((4, 5), dtype, 1), _data((5,), dtype, 2))
    compiled = lt.compile(Fn(fn), inputs)
    # The reference runtime rounds every op's result to the dtype, as PyTorch's CPU kernels
    # mostly do; fused kernels may round less often, hence the tolerance.
    close(compiled(*inputs), fn(*inputs), tol={torch.float16: 2e-2, torch.bfloat16: 6e-2}.get(dtype, 1e-9))


class StridedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 4).t())  # a non-contiguous parameter

    def forward(self, x):
        return x @ self.w


def test_non_contiguous_parameter_crosses_correctly():
    torch.manual_seed(0)
    model = StridedWeight().eval()
    assert not model.w.is_contiguous()
    x = torch.randn(2, 4)
    compiled = lt.compile(model, (x,))
    with torch.no_grad():
        close(compiled(x), model(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "unbatched"])
def test_fold_across_dtypes_and_layouts(dtype, layout):
    """F.fold (aten.col2im): odd output sizes, padding + stride + dilation, non-contiguous input."""
    fn = lambda a: nn.functional.fold(a, (7, 5), (2, 3), dilation=(2, 1), padding=(1, 1), stride=(1, 2))  # noqa: E731
    # blocks: (7 + 2 - 2 - 1) / 1 + 1 = 7 rows, (5 + 2 - 2 - 1) / 2 + 1 = 3 cols -> L = 21
    x = _data((3, 12, 21), dtype, seed=3)
    if layout == "transposed":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
        assert not x.is_contiguous()
    elif layout == "unbatched":
        x = x[0]
    compiled = lt.compile(Fn(fn), (x,))
    close(compiled(x), fn(x), tol={torch.float16: 1e-2, torch.bfloat16: 4e-2}.get(dtype, 1e-5))


def test_col2im_with_inconsistent_sizes_is_a_clear_error():
    g = luminal.Graph()
    with pytest.raises(luminal.Error, match=r"col2im: input \[1, 8, 19\] has 19 blocks .* gives 20"):
        g.tensor([1, 8, 19]).col2im((5, 6), (2, 2))
    with pytest.raises(luminal.Error, match="not divisible by the kernel area 4"):
        g.tensor([1, 7, 20]).col2im((5, 6), (2, 2))
    with pytest.raises(luminal.Error, match="too small for kernel"):
        g.tensor([1, 9, 1]).col2im((2, 2), (3, 3))
    with pytest.raises(luminal.Error, match="rank 3"):
        g.tensor([2, 1, 8, 20]).col2im((5, 6), (2, 2))


# On CUDA, torch.export keeps F.scaled_dot_product_attention as the fused kernel PyTorch
# picks there (efficient, flash or cuDNN attention), which core ATen does not decompose. The
# translation is checked here on CPU (export traces these ops with meta kernels), against
# PyTorch's math path: odd sizes, a query shorter than the keys (causal masks align
# top-left), a float bias, an explicit scale.
aten = torch.ops.aten


class _FusedAttention(nn.Module):
    def __init__(self, kind, causal, scale):
        super().__init__()
        self.kind, self.causal, self.scale = kind, causal, scale

    def forward(self, q, k, v, bias):
        if self.kind == "efficient":
            return aten._scaled_dot_product_efficient_attention(q, k, v, bias, False, 0.0, self.causal,
                                                               scale=self.scale)[0]
        if self.kind == "cudnn":
            return aten._scaled_dot_product_cudnn_attention(q, k, v, bias, False, 0.0, self.causal, False,
                                                           scale=self.scale)[0]
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, self.causal, False, scale=self.scale)[0] + 0 * bias.sum()


@pytest.mark.parametrize("kind,causal,with_bias,scale", [
    ("efficient", False, True, 0.3), ("efficient", True, False, None), ("flash", True, False, None),
    ("flash", False, False, 0.7), ("cudnn", False, True, None)])
def test_fused_attention_ops_translate_to_the_math_they_compute(kind, causal, with_bias, scale):
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4) * 3
    bias = torch.randn(2, 3, 5, 7) if with_bias else torch.zeros(2, 3, 5, 7)
    if kind == "flash" and not causal:  # flash takes no bias
        bias = torch.zeros(2, 3, 5, 7)
    model = _FusedAttention(kind, causal, scale)
    compiled = lt.compile(model, (q, k, v, bias))
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias if with_bias else None, is_causal=causal, scale=scale)
    got = compiled(q, k, v, bias)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
