"""The luminal Python package: graph API, dynamic dims, data in and out (NumPy, DLPack),
errors, runtimes by name, and Hugging Face generation."""
from __future__ import annotations

import gc

import numpy as np
import pytest

luminal = pytest.importorskip("luminal", reason="the luminal Python package is not installed (scripts/setup)")
pytest.importorskip("luminal._luminal")


def test_graph_api_matches_numpy_on_varied_data():
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((3, 5)).astype(np.float32)
    a_np[0, 0], a_np[0, 1], a_np[1, 2] = -0.0, np.inf, -np.inf
    b_np = rng.standard_normal((5,)).astype(np.float32)
    g = luminal.Graph()
    a = g.tensor([3, 5])
    b = g.tensor([5])
    out = ((a * 2.0 - b).relu().sum(1, keepdim=True) + (a.maximum(b)).mean(1, keepdim=True)).output()
    sm = a.softmax(-1).output()
    rt = g.compile()
    rt.set_data(a, a_np)
    rt.set_data(b, b_np)
    rt.execute()
    want = np.maximum(a_np * 2 - b_np, 0).sum(1, keepdims=True) + np.maximum(a_np, b_np).mean(1, keepdims=True)
    np.testing.assert_allclose(rt.get(out), want, rtol=1e-6)
    e = np.exp(a_np[2] - a_np[2].max())
    np.testing.assert_allclose(rt.get(sm)[2], e / e.sum(), rtol=1e-6)


def test_symbolic_dims_and_buckets():
    g = luminal.Graph()
    x = g.tensor(["seq", 4])
    y = (x * x).sum(1).output()
    g.set_dim("seq", 3)
    opts = luminal.CompileOptions(search_graph_limit=1)
    opts.dim_buckets("seq", [luminal.DimBucket(1, 1), luminal.DimBucket(2, 64, 8)])
    rt = g.compile("reference", opts)
    for n in (1, 7, 64):
        data = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 5
        rt.set_data(x, data)
        rt.execute({"seq": n})
        np.testing.assert_allclose(rt.get(y), (data * data).sum(1))
    expr = luminal.Expression.var("seq") * 2 + 1
    assert expr.eval({"seq": 5}) == 11 and int(luminal.Expression(7)) == 7


def test_dlpack_in_and_out_with_torch_and_non_contiguous_arrays():
    torch = pytest.importorskip("torch")
    g = luminal.Graph()
    a = g.tensor([4, 3], luminal.DType.BF16)
    b = g.tensor([4, 3])
    c = (a.cast(luminal.DType.F32) + b).output()
    d = (a * 2.0).output()
    rt = g.compile()
    a_t = torch.randn(3, 4).to(torch.bfloat16).t()  # non-contiguous
    b_np = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(4, 3))  # other dtype, strided
    rt.set_data(a, a_t)
    rt.set_data(b, b_np)
    rt.execute()
    out = torch.from_dlpack(rt.get_dlpack(c))
    torch.testing.assert_close(out, a_t.float() + torch.from_numpy(b_np).float())
    doubled = torch.from_dlpack(rt.get_dlpack(d))
    assert doubled.dtype == torch.bfloat16  # DLPack keeps bfloat16; NumPy gets float32
    torch.testing.assert_close(doubled, a_t * 2)
    assert rt.get(d).dtype == np.float32


def test_tensors_keep_their_graph_alive():
    g = luminal.Graph()
    x = g.tensor([2])
    del g
    gc.collect()
    y = (x + 1.0).output()  # would read a freed graph without the tie
    assert [int(s) for s in y.shape] == [2]


def test_errors_are_luminal_errors_naming_the_problem():
    g = luminal.Graph()
    a = g.tensor([2, 3])
    with pytest.raises(luminal.Error, match="reshape"):
        a.reshape([4, 4])
    assert issubclass(luminal.Error, ValueError)
    with pytest.raises(luminal.Error, match="unknown runtime 'cuda-nope'"):
        g.compile("cuda-nope")
    out = (a * 2.0).output()
    rt = g.compile()
    with pytest.raises(luminal.Error, match="needs 6 elements"):
        rt.set_data(a, np.zeros(5, np.float32))
    other = luminal.Graph().tensor([2, 3])
    with pytest.raises(luminal.Error, match="different graph"):
        rt.set_data(other, np.zeros(6, np.float32))
    with pytest.raises(luminal.Error, match="has no data"):
        rt.get(out)


def test_runtime_registry_lists_reference():
    names = {r["name"]: r for r in luminal.runtimes()}
    assert names["reference"]["device"] == "cpu"


def test_generate_with_the_shipped_model():
    model_dir = luminal.models.default_model_dir()
    tok = luminal.models.Tokenizer.from_file(model_dir)
    gen = luminal.models.Generator.from_pretrained(model_dir, "reference",
                                                    luminal.CompileOptions(search_graph_limit=1), max_seq_len=64)
    prompt = tok.encode("Once upon a time")
    seen = []
    result = gen.generate(prompt, max_new_tokens=6, on_token=lambda t: seen.append(t) or True)
    assert result.tokens == seen and 1 <= len(result.tokens) <= 6
    assert result.stop_reason in ("max_tokens", "stop_token")
    assert isinstance(tok.decode(result.tokens), str)
    assert gen.architecture == "LlamaForCausalLM"


def test_generate_in_bf16_compute():
    model_dir = luminal.models.default_model_dir()
    tok = luminal.models.Tokenizer.from_file(model_dir)
    prompt = tok.encode("Once upon a time")
    logits = {}
    for dt in (luminal.DType.F32, luminal.DType.BF16):
        gen = luminal.models.Generator.from_pretrained(model_dir, "reference",
                                                        luminal.CompileOptions(search_graph_limit=1), max_seq_len=64,
                                                        compute_dtype=dt)
        logits[dt] = np.asarray(gen.forward(prompt), dtype=np.float64).ravel()
    f32, bf16 = logits[luminal.DType.F32], logits[luminal.DType.BF16]
    assert np.all(np.isfinite(bf16)) and bf16.shape == f32.shape
    scale = np.abs(f32).max()
    # BF16 rounding moves the logits (they are not the F32 ones) but only by rounding noise.
    assert 0 < np.abs(bf16 - f32).max() < 0.05 * scale
    with pytest.raises(luminal.Error, match="compute_dtype"):
        luminal.models.Generator.from_pretrained(model_dir, "reference", compute_dtype=luminal.DType.I32)


def test_type_stubs_ship_with_the_package():
    from pathlib import Path

    here = Path(luminal.__file__).parent
    stub = (here / "_luminal.pyi").read_text()
    assert (here / "py.typed").exists()
    assert "class GraphTensor" in stub and "def matmul" in stub and "def compile" in stub


def test_new_tensor_ops_from_python():
    """The ops of issue 11 item 5 reach Python: methods, operators, tuple results, creation."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((3, 4)).astype(np.float32)
    i_np = rng.integers(-50, 50, (3, 4)).astype(np.int64)
    g = luminal.Graph()
    a = g.tensor([3, 4])
    i = g.tensor([3, 4], luminal.DType.I64)
    outs = {
        "atan2": a.atan2(a.t().reshape([3, 4])).output(),
        "log1p": a.abs().log1p().output(),
        "bits": ((i & 12) | (i ^ -3) + ~i).output(),
        "cummax": a.cummax(1)[1].output(),
        "median": a.median(1)[0].output(),
        "einsum": luminal.GraphTensor.einsum("ij,kj->ik", [a, a]).output(),
        "interp": a.reshape([1, 1, 3, 4]).interpolate([5, 7], "bilinear").output(),
        "eye": (g.eye(3, 4) + g.linspace(0.0, 1.0, 4)).output(),
        "roll": a.roll([1, -1], [0, 1]).output(),
    }
    same_a = g.rand([64], 5).output()
    same_b = g.rand([64], 5).output()
    rt = g.compile()
    rt.set_data(a, a_np)
    rt.set_data(i, i_np)
    rt.execute()
    ta, ti = torch.from_numpy(a_np), torch.from_numpy(i_np)
    want = {
        "atan2": torch.atan2(ta, ta.t().reshape(3, 4)),
        "log1p": ta.abs().log1p(),
        "bits": (ti & 12) | (ti ^ -3) + ~ti,
        "cummax": ta.cummax(1).indices,
        "median": ta.median(1).values,
        "einsum": torch.einsum("ij,kj->ik", ta, ta),
        "interp": torch.nn.functional.interpolate(ta.reshape(1, 1, 3, 4), size=(5, 7), mode="bilinear"),
        "eye": torch.eye(3, 4) + torch.linspace(0, 1, 4),
        "roll": ta.roll((1, -1), (0, 1)),
    }
    for name, t in outs.items():
        np.testing.assert_allclose(rt.get(t), want[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    u = rt.get(same_a)
    np.testing.assert_array_equal(u, rt.get(same_b))
    assert ((u >= 0) & (u < 1)).all() and len(np.unique(u)) > 60
    with pytest.raises(luminal.Error, match="^glu:"):
        a.glu(0)
