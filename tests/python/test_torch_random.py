"""Random ATen ops in luminal.torch (rand, randn, *_like, randint, bernoulli, dropout,
uniform_, normal, exponential_). luminal cannot replay PyTorch's generator, so the contract
(docs/PYTHON.md) is distribution-level: the statistics match the distribution, the same
torch.manual_seed gives the same numbers, another seed or the next call other numbers, and
what cannot be drawn faithfully is an error naming the op and the model's line."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
import luminal.torch as lt  # noqa: E402
from torch import nn  # noqa: E402

from test_torch_export import Fn  # noqa: E402

N = (200, 300)  # 60000 draws: the mean of U(0, 1) is within 0.004 with 6 sigma


def compiled_fn(fn, *inputs):
    return lt.compile(Fn(fn), inputs)


def draw(compiled, *inputs, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        return compiled(*inputs)


def assert_moments(x, mean, var, n_sigma=6.0):
    x = x.double().flatten()
    n = x.numel()
    assert abs(x.mean().item() - mean) <= n_sigma * math.sqrt(var / n), (x.mean().item(), mean)
    # The sample variance's standard error is about var * sqrt(2 / n) for these light tails.
    assert abs(x.var().item() - var) <= n_sigma * var * math.sqrt(3.0 / n), (x.var().item(), var)


def assert_uncorrelated(x):
    x = x.double().flatten()
    c = x - x.mean()
    lag1 = (c[:-1] * c[1:]).mean() / (c * c).mean()
    assert abs(lag1.item()) < 6 / math.sqrt(x.numel()), lag1.item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rand_and_randn_match_their_distributions(dtype):
    compiled = compiled_fn(lambda a: (torch.rand(N, dtype=dtype), torch.randn(N, dtype=dtype) + a), torch.zeros(()))
    u, z = draw(compiled, torch.zeros(()), seed=0)
    assert u.dtype == dtype and z.dtype == dtype and u.shape == N and z.shape == N
    assert u.min() >= 0 and u.max() < 1, (u.min(), u.max())
    assert_moments(u, 0.5, 1 / 12)
    assert_moments(z, 0.0, 1.0)
    assert z.abs().max() < 7 and torch.isfinite(z).all()
    if dtype in (torch.float32, torch.float64):
        assert_uncorrelated(u)
        assert_uncorrelated(z)
        # Normal tails: about 4.55 % of draws beyond 2 sigma.
        assert abs((z.abs() > 2).double().mean().item() - 0.0455) < 0.006


def test_same_seed_same_numbers_other_seed_or_next_call_other_numbers():
    compiled = compiled_fn(lambda a: a + torch.rand(64, 32), torch.zeros(64, 32))
    x = torch.zeros(64, 32)
    first = draw(compiled, x, seed=3)
    again = draw(compiled, x, seed=3)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    other_seed = draw(compiled, x, seed=4)
    next_call = draw(compiled, x)  # no reseed: torch's generator moved on
    for other in (other_seed, next_call):
        assert (other != first).double().mean() > 0.99
    # Two random ops in one graph draw independent numbers.
    two = compiled_fn(lambda a: (torch.rand(64, 32) + a, torch.rand(64, 32) + a), x)
    a, b = draw(two, x, seed=3)
    assert (a != b).double().mean() > 0.99
    assert abs(torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()) < 0.05


def test_like_ops_follow_the_input_shape_and_dtype():
    x = torch.zeros(150, 401, dtype=torch.float64)
    compiled = compiled_fn(lambda a: (torch.rand_like(a), torch.randn_like(a)), x)
    u, z = draw(compiled, x, seed=1)
    assert u.dtype == torch.float64 and u.shape == x.shape and z.shape == x.shape
    assert_moments(u, 0.5, 1 / 12)
    assert_moments(z, 0.0, 1.0)


@pytest.mark.parametrize("low,high,dtype", [(0, 10, torch.int64), (-7, 3, torch.int32), (5, 6, torch.int64),
                                            (-1000, 1000, torch.float32)])
def test_randint_covers_its_range_uniformly(low, high, dtype):
    compiled = compiled_fn(lambda a: torch.randint(low, high, N, dtype=dtype) + a, torch.zeros((), dtype=dtype))
    r = draw(compiled, torch.zeros((), dtype=dtype), seed=2)
    assert r.dtype == dtype and r.shape == N
    assert r.min() >= low and r.max() < high
    span = high - low
    assert_moments(r, (low + high - 1) / 2, (span * span - 1) / 12)
    if span <= 10:
        counts = torch.bincount((r.long() - low).flatten(), minlength=span).double()
        expected = r.numel() / span
        assert ((counts - expected).abs() <= 6 * math.sqrt(expected)).all(), counts


def test_randint_like_and_default_low():
    x = torch.zeros(N, dtype=torch.int64)
    compiled = compiled_fn(lambda a: (torch.randint_like(a, 4), torch.randint_like(a, -3, 3), torch.randint(7, N)), x)
    a, b, c = draw(compiled, x, seed=5)
    assert a.min() == 0 and a.max() == 3 and b.min() == -3 and b.max() == 2 and c.min() == 0 and c.max() == 6
    assert_moments(c.double(), 3.0, 4.0)


def test_bernoulli_probabilities():
    p = torch.linspace(0, 1, 11).repeat_interleave(6000).reshape(11, 6000)
    compiled = compiled_fn(lambda q: (torch.bernoulli(q), torch.bernoulli(q, 0.3), q.bernoulli()), p)
    b, b03, b2 = draw(compiled, p, seed=6)
    assert b.dtype == p.dtype and set(b.unique().tolist()) <= {0.0, 1.0}
    for k in range(11):
        pk = k / 10
        sd = math.sqrt(max(pk * (1 - pk), 1e-12) / 6000)
        assert abs(b[k].mean().item() - pk) <= 6 * sd + 1e-12, (k, b[k].mean())
        assert abs(b2[k].mean().item() - pk) <= 6 * sd + 1e-12
    assert b[0].sum() == 0 and b[10].sum() == 6000  # p = 0 and p = 1 are exact
    assert abs(b03.mean().item() - 0.3) <= 6 * math.sqrt(0.21 / b03.numel())
    assert (b != b2).any()  # independent draws


def test_dropout_training_zeroes_with_probability_p_and_scales_the_rest():
    x = torch.randn(N) * 3 + 0.5
    compiled = compiled_fn(lambda a: nn.functional.dropout(a, 0.25, training=True), x)
    y = draw(compiled, x, seed=7)
    dropped = y == 0
    assert abs(dropped.double().mean().item() - 0.25) <= 6 * math.sqrt(0.25 * 0.75 / x.numel())
    torch.testing.assert_close(y[~dropped], x[~dropped] / 0.75)
    # Eval-mode dropout is the identity, with nothing random in the graph.
    ident = compiled_fn(lambda a: nn.functional.dropout(a, 0.25, training=False) * 2, x)
    torch.testing.assert_close(draw(ident, x), x * 2, rtol=0, atol=0)
    assert all(inp.kind != "rng" for inp in ident.program.t.inputs)
    # The nn.Module in eval mode (luminal.torch.compile calls model.eval()).
    net = nn.Sequential(nn.Dropout(0.5), nn.Linear(4, 2))
    compiled_net = lt.compile(net, (torch.randn(3, 4),))
    xs = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled_net(xs), net(xs))


def test_uniform_normal_and_exponential_in_place_draws():
    x = torch.zeros(N)

    def fn(a):
        return (torch.empty_like(a).uniform_(-2, 3), torch.empty_like(a).normal_(1.5, 0.5),
                torch.normal(a + 4, 2.0), torch.empty_like(a).exponential_(2.0))
    u, n1, n2, e = draw(compiled_fn(fn, x), x, seed=8)
    assert u.min() >= -2 and u.max() < 3
    assert_moments(u, 0.5, 25 / 12)
    assert_moments(n1, 1.5, 0.25)
    assert_moments(n2, 4.0, 4.0)
    assert e.min() >= 0
    assert_moments(e, 0.5, 0.25, n_sigma=8)


def test_symbolic_shapes_draw_per_call_sizes():
    from torch.export import Dim

    x = torch.zeros(2, 700)
    # Fn.forward takes *xs, so its dynamic shapes nest one level deeper.
    compiled = lt.compile(Fn(lambda a: a + torch.rand_like(a)), (x,), dynamic_shapes=(({1: Dim("n", max=4096)},),))
    for n in (300, 4000):
        y = draw(compiled, torch.zeros(2, n), seed=9)
        assert y.shape == (2, n) and y.min() >= 0 and y.max() < 1
        assert abs(y.mean().item() - 0.5) < 6 * math.sqrt(1 / 12 / y.numel())


def test_random_ops_under_torch_compile():
    torch._dynamo.reset()
    model = Fn(lambda a: a + torch.randn_like(a))
    compiled = torch.compile(model, backend="luminal", options={"fallback": "error"})
    x = torch.zeros(N)
    with torch.no_grad():
        torch.manual_seed(11)
        a = compiled(x)
        torch.manual_seed(11)
        b = compiled(x)
        c = compiled(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (a != c).double().mean() > 0.99
    assert_moments(a, 0.0, 1.0)
    torch._dynamo.reset()


def test_randperm_is_a_uniformly_shuffled_permutation():
    n = 2000
    x = torch.zeros(n)
    compiled = compiled_fn(lambda a: (torch.randperm(n) + a, torch.randperm(7)), x)
    p, small = draw(compiled, x, seed=12)
    assert torch.equal(p.sort().values, torch.arange(n, dtype=torch.float32))
    assert torch.equal(small.sort().values, torch.arange(7))
    # Position and value are uncorrelated, and few elements stay in place (1 expected).
    idx = torch.arange(n, dtype=torch.float64)
    assert abs(torch.corrcoef(torch.stack([idx, p.double()]))[0, 1].item()) < 6 / math.sqrt(n)
    assert (p.long() == idx.long()).sum() <= 8
    again, _ = draw(compiled, x, seed=12)
    other, _ = draw(compiled, x)
    assert torch.equal(p, again) and not torch.equal(p, other)
    with pytest.raises(lt.UnsupportedOpError, match=r"randperm\(5000\): at most 4096"):
        compiled_fn(lambda a: torch.randperm(5000) + a, torch.zeros(5000))


class WithPoisson(nn.Module):
    def forward(self, x):
        return torch.poisson(x) + x  # no translator: an error


class WideRandint(nn.Module):
    def forward(self, x):
        return torch.randint(0, 1 << 40, (3,)) + x  # 40 bits: more than one draw carries


def test_untranslatable_random_ops_are_errors_naming_op_and_line():
    with pytest.raises(lt.UnsupportedOpError, match=r"aten\.poisson.*test_torch_random\.py:\d+"):
        lt.compile(WithPoisson(), (torch.ones(5),))
    with pytest.raises(lt.UnsupportedOpError, match=r"aten\.randint.*test_torch_random\.py:\d+.*randint over a range"):
        lt.compile(WideRandint(), (torch.zeros(3, dtype=torch.int64),))
    with pytest.raises(lt.UnsupportedOpError, match=r"aten\.multinomial"):
        lt.compile(Fn(lambda a: torch.multinomial(a, 2)), (torch.ones(2, 4),))
