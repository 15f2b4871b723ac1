"""The README's Python quick start, extracted and run as written."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")


def test_readme_python_quick_start_runs():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Using it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README has no Python quick start block"
    import torch

    torch._dynamo.reset()
    exec(compile(blocks[0], "README.md (Python quick start)", "exec"), {"__name__": "readme"})
