"""docs/torch_ops.md is generated (scripts/gen_torch_ops.py); its 'translated' column must
agree with the op table, so the coverage it reports is the coverage that exists."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")

ROOT = Path(__file__).resolve().parents[2]


def test_torch_ops_doc_matches_the_op_table():
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_torch_ops

    rows = dict(re.findall(r"^\| `([^`]+)` \| (yes|no) \|", (ROOT / "docs" / "torch_ops.md").read_text(), re.M))
    assert rows, "docs/torch_ops.md has no op rows"
    stale = [name for name, op in ((gen_torch_ops.op_name(op), op) for op in gen_torch_ops.core_aten_ops())
             if rows.get(name) != ("yes" if gen_torch_ops.translated(op) else "no")]
    assert not stale, f"docs/torch_ops.md is stale for {stale[:5]}...: run scripts/gen_torch_ops.py"
