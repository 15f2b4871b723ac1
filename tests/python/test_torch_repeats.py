"""luminal.torch.compile keeps a model's repeated layers repeated: each weight becomes a graph
input where it is first used, so every layer is the same run of nodes and the compiler finds
the layers as one block (docs/SEARCH.md, Repeated structure) and searches it once."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")
import luminal.torch as lt  # noqa: E402
from torch import nn  # noqa: E402


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 3 * dim)
        self.down = nn.Linear(3 * dim, dim)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Stack(nn.Module):
    """Identical residual layers between a stem and a head; an unused parameter and a buffer
    the forward updates (both become inputs only at the end of the graph)."""

    def __init__(self, layers=5, dim=12):
        super().__init__()
        self.stem = nn.Linear(7, dim)
        self.layers = nn.ModuleList(Layer(dim) for _ in range(layers))
        self.head = nn.Linear(dim, 3)
        self.unused = nn.Parameter(torch.randn(4))
        self.register_buffer("calls", torch.zeros(2))

    def forward(self, x):
        self.calls.add_(1)
        x = self.stem(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.mark.parametrize("runtime", ["reference", "cpu"])
def test_identical_layers_are_found_as_one_repeated_block(runtime):
    torch.manual_seed(3)
    model = Stack().eval()
    with torch.no_grad():
        for p in model.parameters():  # varied weights of both signs, not the initialiser's
            p.copy_(torch.randn_like(p) * 0.5)
    eager = Stack().eval()
    eager.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 7)
    x[0, 0, :3] = torch.tensor([0.0, -0.0, 1e-40])
    compiled = lt.compile(model, (x,), runtime=runtime)
    report = compiled.runtime.report
    # Weights created up front made the weights themselves the longest repeat (a few Inputs
    # per layer); now the block is a whole layer, its weights included.
    assert report.block_copies >= 4, str(report)
    assert report.block_period >= 20, str(report)
    for _ in range(2):
        with torch.no_grad():
            out, ref = compiled(x), eager(x)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(model.calls, eager.calls)  # the buffer update still reaches the model
