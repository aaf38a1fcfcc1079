"""The compile comparison of benchmarks/kernel_refactor_resources.py: what it calls a regression, and the committed
before/after figures of the shared score helpers (docs/kernels.md: no register, spill or shared-memory regression on
the default configs)."""

import importlib.util
import itertools
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernel_refactor_resources.py"
RESULTS = ROOT / "benchmarks" / "results" / "kernel_refactor_resources.json"


def _script():
    spec = importlib.util.spec_from_file_location("kernel_refactor_resources", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROW = {"registers": 200, "spill_bytes": 0, "shared_bytes": 65536, "sass_instructions": 1800}


def test_a_regression_is_more_registers_spills_or_shared_memory_not_more_instructions():
    worse = _script().worse
    assert worse(dict(ROW), ROW) == []
    assert worse(dict(ROW, registers=201), ROW) == ["registers"]
    assert worse(dict(ROW, spill_bytes=4), ROW) == ["spill_bytes"]
    assert worse(dict(ROW, shared_bytes=65537), ROW) == ["shared_bytes"]
    assert worse(dict(ROW, registers=201, shared_bytes=65537), ROW) == ["registers", "shared_bytes"]
    assert worse(dict(ROW, registers=199, spill_bytes=0, sass_instructions=9999), ROW) == []


def test_the_committed_comparison_covers_every_kernel_and_flag_set_and_shows_no_regression():
    script = _script()
    data = json.loads(RESULTS.read_text())
    after = {script.key(row): row for row in data["rows"]}
    before = {script.key(row): row for row in data["before"]}
    expected = set(itertools.product(script.KERNEL_NAMES, (64, 128), script.FLAG_SETS))
    assert set(after) == expected
    assert set(before) == expected
    regressions = {key: script.worse(after[key], before[key]) for key in expected}
    assert {key: more for key, more in regressions.items() if more} == {}
