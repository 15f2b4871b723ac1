"""torch.compile(model, backend="luminal"): the entry-point backend, options, errors, and
static-KV-cache decoding without recompiling."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
import luminal.torch as lt  # noqa: E402
from torch import nn  # noqa: E402

from test_torch_export import StaticCacheDecoder, UsesUnsupported, close  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backend_is_registered_by_entry_point():
    from torch._dynamo.backends.registry import list_backends

    assert "luminal" in list_backends(exclude_tags=())


def test_compiled_mlp_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3)).eval()
    compiled = torch.compile(model, backend="luminal", options={"search_budget": 2})
    x = torch.randn(4, 6)
    with torch.no_grad():
        close(compiled(x), model(x))


def test_unknown_option_is_an_error():
    compiled = torch.compile(nn.Linear(2, 2), backend="luminal", options={"search_iterations": 3})
    with pytest.raises(Exception, match="unknown option"):
        with torch.no_grad():
            compiled(torch.randn(1, 2))


def test_unsupported_op_is_a_clear_error_with_fallback_error():
    compiled = torch.compile(UsesUnsupported(), backend="luminal", options={"fallback": "error"})
    with pytest.raises(Exception, match=r"luminal cannot translate aten\.linalg_qr.*test_torch_export\.py"):
        with torch.no_grad():
            compiled(torch.randn(3, 3))


class QrBetween(nn.Module):
    def forward(self, x):
        q = torch.linalg.qr(x.relu() + 1).Q
        return (q @ x).tanh() * 2


def test_unsupported_op_runs_in_pytorch_with_a_warning_by_default():
    model = QrBetween()
    x = torch.randn(4, 4)
    compiled = torch.compile(model, backend="luminal")
    start = lt.stats["compiles"]
    with torch.no_grad(), pytest.warns(UserWarning, match=r"aten\.linalg_qr.*runs in PyTorch"):
        out = compiled(x)
    close(out, model(x), tol=1e-5)
    assert lt.stats["compiles"] - start == 2  # the regions before and after the break


def test_static_kv_cache_decodes_32_tokens_without_recompiling():
    torch.manual_seed(0)
    model = StaticCacheDecoder(max_seq=40).eval()
    eager = StaticCacheDecoder(max_seq=40).eval()
    eager.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="luminal")
    start = lt.stats["compiles"]
    with torch.no_grad():
        for step in range(32):
            x, pos = torch.randn(1, 8), torch.tensor([step])
            close(compiled(x, pos), eager(x, pos))
    assert lt.stats["compiles"] - start == 1, "decoding recompiled"
    close(model.k_cache, eager.k_cache)
    close(model.v_cache, eager.v_cache)


def test_hf_llama_static_cache_decodes_32_tokens_on_one_decode_compile():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(0, 96, (1, 5))

    def decode(m, steps=32):
        cache = transformers.StaticCache(config=cfg, max_cache_len=40)
        rows, tok, pos = [], prompt, torch.arange(5)
        with torch.no_grad():
            for _ in range(steps + 1):
                logits = m(input_ids=tok, cache=cache, cache_position=pos, use_cache=True).logits
                rows.append(logits[:, -1])
                tok, pos = logits[:, -1:].argmax(-1), pos[-1:] + 1
        return torch.cat(rows)

    want = decode(model)
    start = lt.stats["compiles"]
    got = decode(torch.compile(model, backend="luminal"))
    assert lt.stats["compiles"] - start == 2, "one prefill graph and one decode graph, then no recompiles"
    close(got, want, tol=1e-4)


def test_dynamic_shapes_under_torch_compile_compile_once():
    from test_torch_export import Attention

    torch.manual_seed(0)
    model = Attention().eval()
    compiled = torch.compile(model, backend="luminal", dynamic=True)
    start = lt.stats["compiles"]
    with torch.no_grad():
        for n in (3, 5, 9, 17):
            x = torch.randn(1, n, 8)
            close(compiled(x), model(x))
    assert lt.stats["compiles"] - start == 1


def test_fold_and_unfold_translate_whole_under_torch_compile():
    # PyTorch's core decompositions split col2im into an accumulating index_put over
    # non-leading indices; the backend keeps it whole (luminal.torch._ops.KEEP_WHOLE).
    fn = lambda a: nn.functional.fold(nn.functional.unfold(a, 3, padding=1, stride=2) * 1.5, (5, 7), 3,  # noqa: E731
                                      padding=1, stride=2)
    x = torch.randn(2, 3, 5, 7)
    compiled = torch.compile(fn, backend="luminal", options={"fallback": "error"})
    with torch.no_grad():
        close(compiled(x), fn(x))
