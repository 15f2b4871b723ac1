"""The PyTorch corpus: real architectures with random weights at small configs, compiled
through luminal.torch.compile (torch.export -> core ATen -> luminal) on the reference
runtime and compared with eager PyTorch. bench/suite_torch.py times the same corpus."""
from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402


def _seeded():
    torch.manual_seed(0)


def _randomized(model):
    """Random weights everywhere: some architectures initialise heads or scales to zero
    or one, which would hide errors in the ops that read them."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


class _LogitsOnly(nn.Module):
    """A Hugging Face model called without a cache; returns one tensor."""

    def __init__(self, model, field="logits", **call_kwargs):
        super().__init__()
        self.model, self.field, self.call_kwargs = model, field, call_kwargs

    def forward(self, x):
        return getattr(self.model(x, **self.call_kwargs), self.field)


def _ids(vocab, n=7):
    return torch.randint(0, vocab, (1, n))


def mlp():
    _seeded()
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    return _randomized(model), (torch.randn(5, 16),)


class MiniDLRM(nn.Module):
    """The reference's MiniDLRM: bottom MLP over dense features, one embedding per sparse
    feature, pairwise dot-product interaction (strict lower triangle), top MLP, sigmoid."""

    def __init__(self, tables=(10, 20, 30), width=4, bottom=(13, 8, 4), top=(10, 8, 1)):
        super().__init__()

        def mlp_of(sizes, last_relu):
            layers = []
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
                layers.append(nn.Linear(a, b))
                if last_relu or i < len(sizes) - 2:
                    layers.append(nn.ReLU())
            return nn.Sequential(*layers)

        self.bottom = mlp_of(bottom, True)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(n, width, mode="sum") for n in tables)
        self.top = mlp_of(top, False)
        n_feat = len(tables) + 1
        rows, cols = torch.tril_indices(n_feat, n_feat, offset=-1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        feats = [x] + [emb(sparse[:, i : i + 1]) for i, emb in enumerate(self.embeddings)]
        t = torch.stack(feats, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        pairs = z[:, self.rows, self.cols]
        return torch.sigmoid(self.top(torch.cat([x, pairs], dim=1)))


def mini_dlrm(batch=8):
    _seeded()
    sparse = torch.stack([torch.randint(0, n, (batch,)) for n in (10, 20, 30)], dim=1)
    return _randomized(MiniDLRM()), (torch.randn(batch, 13), sparse)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    _seeded()
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return _randomized(_LogitsOnly(LlamaForCausalLM(cfg), use_cache=False)), (_ids(96),)


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _seeded()
    cfg = Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    return _randomized(_LogitsOnly(Qwen3ForCausalLM(cfg), use_cache=False)), (_ids(96),)


def gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    _seeded()
    cfg = Gemma3TextConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           sliding_window=4, query_pre_attn_scalar=8)
    return _randomized(_LogitsOnly(Gemma3ForCausalLM(cfg), use_cache=False)), (_ids(96),)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    _seeded()
    cfg = GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return _randomized(_LogitsOnly(GPT2LMHeadModel(cfg), use_cache=False)), (_ids(96),)


def bert():
    from transformers import BertConfig, BertModel

    _seeded()
    cfg = BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    return _randomized(_LogitsOnly(BertModel(cfg), field="last_hidden_state")), (_ids(96),)


def t5_encoder():
    from transformers import T5Config, T5EncoderModel

    _seeded()
    cfg = T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    return _randomized(_LogitsOnly(T5EncoderModel(cfg), field="last_hidden_state")), (_ids(96),)


def whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    _seeded()
    cfg = WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
                        decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=64, num_mel_bins=8,
                        max_source_positions=8, vocab_size=96, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1)
    encoder = WhisperEncoder(cfg)
    return _randomized(_LogitsOnly(encoder, field="last_hidden_state")), (torch.randn(1, 8, 16),)


def resnet18():
    import torchvision

    _seeded()
    return _randomized(torchvision.models.resnet18(num_classes=10)), (torch.randn(1, 3, 32, 32),)


def mobilenet_v3_small():
    import torchvision

    _seeded()
    return _randomized(torchvision.models.mobilenet_v3_small(num_classes=10)), (torch.randn(1, 3, 32, 32),)


def vit_b_16():
    import torchvision

    _seeded()
    return _randomized(torchvision.models.vit_b_16(image_size=32, num_classes=10)), (torch.randn(1, 3, 32, 32),)


CORPUS = {
    "mlp": mlp, "mini_dlrm": mini_dlrm, "llama": llama, "qwen3": qwen3, "gemma3": gemma3, "gpt2": gpt2,
    "bert": bert, "t5_encoder": t5_encoder, "whisper_encoder": whisper_encoder, "resnet18": resnet18,
    "mobilenet_v3_small": mobilenet_v3_small, "vit_b_16": vit_b_16,
}


def compile_and_compare(name):
    """Compile one corpus model, run it, and return (luminal output, eager output, seconds)."""
    import luminal.torch as lt

    model, inputs = CORPUS[name]()
    t0 = time.perf_counter()
    compiled = lt.compile(model, inputs)
    t1 = time.perf_counter()
    out = compiled(*inputs)
    with torch.no_grad():
        ref = model(*inputs)
    return out, ref, t1 - t0


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "vit_b_16" else n for n in CORPUS])
def test_corpus_model_matches_eager(name):
    pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
    if name in ("resnet18", "mobilenet_v3_small", "vit_b_16"):
        pytest.importorskip("torchvision")
    out, ref, compile_s = compile_and_compare(name)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    scale = ref.abs().max().item()
    assert scale > 1e-3, f"{name}: the eager output is ~0; the comparison would prove nothing"
    err = (out.double() - ref.double()).abs().max().item()
    print(f"{name}: translates, compile {compile_s:.2f}s, max abs error {err:.3g} (output scale {scale:.3g})")
    assert err <= 1e-4 * max(1.0, scale), f"{name}: max error {err} vs eager"


TEXT_MODELS = ["llama", "qwen3", "gemma3", "gpt2", "bert", "t5_encoder"]


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_text_model_with_a_dynamic_sequence_length_compiles_once(name):
    pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
    import luminal.torch as lt
    from torch.export import Dim

    model, (ids,) = CORPUS[name]()
    compiled = lt.compile(model, (ids,), dynamic_shapes=({1: Dim("seq", min=2, max=48)},))
    start = lt.stats["compiles"]
    gen = torch.Generator().manual_seed(3)
    for n in (2, 13, 48):
        x = torch.randint(0, 96, (1, n), generator=gen)
        with torch.no_grad():
            ref = model(x)
        err = (compiled(x).double() - ref.double()).abs().max().item()
        assert err <= 1e-4 * max(1.0, ref.abs().max().item()), f"{name} at seq {n}: max error {err}"
    assert lt.stats["compiles"] == start, "a new sequence length recompiled"
