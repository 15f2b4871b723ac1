"""bench/suite_torch.py (scripts/bench torch): its arguments, and the clear error of
--device cuda where no GPU can run it. The timings themselves are not tested here."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("luminal._luminal", reason="the luminal Python package is not installed (scripts/setup)")

SUITE = Path(__file__).resolve().parents[2] / "bench" / "suite_torch.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("suite_torch", SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments(suite, monkeypatch):
    monkeypatch.delenv("LUMINAL_BENCH_RUNTIME", raising=False)
    a = suite.parse_args([])
    assert (a.device, a.runtime) == ("cpu", "cpu") and a.cases == list(suite.CASES)
    a = suite.parse_args(["--device", "cuda", "mlp", "bert"])
    assert (a.device, a.runtime, a.cases) == ("cuda", "cuda", ["mlp", "bert"])
    monkeypatch.setenv("LUMINAL_BENCH_RUNTIME", "reference")
    assert suite.parse_args(["mlp"]).runtime == "reference"
    for bad in (["--device", "tpu"], ["no_such_model"]):
        with pytest.raises(SystemExit) as e:
            suite.parse_args(bad)
        assert e.value.code == 2


def test_device_checks(suite):
    assert suite.check_device("cpu", "cpu") is None
    assert "not in this build" in suite.check_device("cpu", "nope")
    assert "runs on 'cpu', not on 'cuda'" in suite.check_device("cuda", "reference")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: --device cuda would run")
def test_cuda_without_a_gpu_exits_with_a_clear_message():
    r = subprocess.run([sys.executable, str(SUITE), "--device", "cuda", "mlp"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""  # no JSON line pretends a result
    assert "suite_torch:" in r.stderr and ("torch.cuda.is_available() is False" in r.stderr
                                           or "not in this build" in r.stderr), r.stderr
