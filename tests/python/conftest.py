"""Shared pytest fixtures for the Python-side tests of luminal."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def luminal_bin() -> Path:
    """The `luminal` CLI: $LUMINAL_BIN, else build/release/models/luminal."""
    env = os.environ.get("LUMINAL_BIN")
    path = Path(env) if env else REPO_ROOT / "build" / "release" / "models" / "luminal"
    if not path.is_file() or not os.access(path, os.X_OK):
        # A missing binary is a failure, never a skip: a skipped suite looks green.
        pytest.fail(f"luminal CLI not found at {path}: build it (cmake --preset release && "
                    f"cmake --build build/release) or set LUMINAL_BIN")
    return path


def pytest_configure(config):
    # `slow` tests still run by default; deselect them with -m "not slow".
    config.addinivalue_line("markers", "slow: long-running test (runs by default; -m 'not slow' skips it)")
