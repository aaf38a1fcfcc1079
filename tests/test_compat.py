"""The supported range (docs/install.md, "Supported versions"): the floors pyproject.toml states are the versions the
compatibility run's floor point tests, the one-line messages for what is older, and the mechanisms that make older
torch and triton releases in the range behave as the newest (each also runs for real at its point:
scripts/compat.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _compat():
    spec = importlib.util.spec_from_file_location("compat_script", ROOT / "scripts" / "compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _floors() -> dict[str, str]:
    """Each requirement's ``>=`` floor in pyproject.toml, the extras' included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    floors = {}
    for requirement in map(Requirement, requirements):
        for specifier in requirement.specifier:
            if specifier.operator == ">=":
                floors[requirement.name.lower()] = specifier.version
    return floors


def test_the_floor_point_installs_exactly_the_floors_pyproject_states():
    """The range in pyproject.toml is the tested one: the floor point pins torch, triton, transformers, jaxtyping and
    beartype at exactly their stated floors, on the oldest Python stated."""
    compat = _compat()
    floors = _floors()
    pins = dict(pin.split("==") for pin in compat.POINTS["floor"]["pins"] if "==" in pin)
    for name in ("torch", "triton", "transformers", "jaxtyping", "beartype", "einops", "safetensors", "tqdm"):
        assert Version(pins[name]).release[: len(Version(floors[name]).release)] == Version(floors[name]).release, name
    requires_python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires_python == f">={compat.POINTS['floor']['python']}"
    from transformer.common.versions import OLDEST_TORCH
    from transformer.kernels import OLDEST_TRITON

    assert ".".join(map(str, OLDEST_TORCH)) == floors["torch"]
    assert ".".join(map(str, OLDEST_TRITON)) == floors["triton"]
    # the GPU machine's set is a point of the matrix
    gpu = compat.POINTS["gpu"]
    assert gpu["python"] == "3.12" and {"torch==2.11.0", "triton==3.6.0", "transformers==5.17.0"} <= set(gpu["pins"])


def test_the_subset_names_test_files_that_exist():
    compat = _compat()
    files = [f for group in compat.SUBSET.values() for f in group]
    assert files and all((ROOT / f.split("::")[0]).is_file() for f in files)
    for node in (f for f in files if "::" in f):  # a single test: it exists in its file
        assert f"def {node.split('::')[1]}(" in (ROOT / node.split("::")[0]).read_text()
    assert len(files) == len(set(files))


def test_the_table_reads_every_results_file_and_marks_what_failed(tmp_path, monkeypatch):
    compat = _compat()
    monkeypatch.setattr(compat, "RESULTS", tmp_path)
    passing = {
        "point": "floor",
        "what": "the oldest",
        "date": "2026-12-01",
        "versions": {"python": "3.11.7", "torch": "2.9.1", "triton": "3.5.1", "transformers": "5.4.0"},
        "kept": True,
        "checks": {
            "tour": {"ok": True},
            "subset": {"ok": True, "summary": "521 passed, 2 skipped, 14145 warnings in 161.60s (0:02:41)"},
            "main job": {"ok": True},
        },
    }
    failing = json.loads(json.dumps(passing)) | {"point": "gpu", "kept": False}
    failing["checks"]["main job"]["ok"] = False
    failing["checks"]["gpu_check dry run"] = {"ok": False, "failed_checks": 3}
    (tmp_path / "floor.json").write_text(json.dumps(passing))
    (tmp_path / "gpu.json").write_text(json.dumps(failing))
    rows = compat.table().splitlines()
    assert len(rows) == 4  # header, rule, the two points that have results, in the matrix's order
    assert rows[2].startswith("| floor (the oldest) | 3.11.7 | 2.9.1 | 3.5.1 | 5.4.0 |")
    assert rows[2].endswith("| yes | 521 passed, 2 skipped, 14145 warnings | yes |  | 2026-12-01 |")
    assert "| 521 passed, 2 skipped, 14145 warnings |" in rows[2] and "**no**" not in rows[2]
    assert rows[3].count("**no**") == 3  # not kept, the main job and the GPU script's dry run failed
    assert "| **no** (3 failed checks) |" in rows[3]


def test_junit_counts_split_by_test_file(tmp_path):
    compat = _compat()
    xml = tmp_path / "j.xml"
    xml.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.test_lm" name="a"/>'
        '<testcase classname="tests.test_lm" name="b"><failure/></testcase>'
        '<testcase classname="tests.kernels.test_api" name="c"><skipped/></testcase>'
        '<testcase classname="tests.test_parity.TestX" name="d"><error/></testcase>'
        "</testsuite></testsuites>"
    )
    assert compat._junit_counts(xml) == {
        "tests/test_lm.py": {"passed": 1, "failed": 1, "skipped": 0},
        "tests/kernels/test_api.py": {"passed": 0, "failed": 0, "skipped": 1},
        "tests/test_parity.py": {"passed": 0, "failed": 1, "skipped": 0},
    }


def test_a_torch_older_than_the_range_is_said_in_one_warning():
    from transformer.common.versions import OLDEST_TORCH, warn_if_unsupported

    with pytest.warns(UserWarning) as caught:
        warn_if_unsupported((2, 6), "2.6.0+cu124")
    (message,) = [str(w.message) for w in caught]
    assert "\n" not in message
    assert message.startswith("typed-transformer supports torch >= 2.9 and torch 2.6.0+cu124 is installed")
    assert message.endswith('pip install "torch>=2.9"')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_unsupported(OLDEST_TORCH, "2.9.0")
        warn_if_unsupported((2, 14), "2.14.1")


def test_a_triton_older_than_the_kernels_need_is_refused_in_one_line(monkeypatch):
    from transformer.backends import choice

    monkeypatch.setattr(choice, "_OLD_TRITON", [])
    monkeypatch.setattr("importlib.metadata.version", lambda name: {"triton": "3.4.0"}[name])
    assert choice._old_triton_reason() == (
        "Triton 3.4.0 is older than 3.5, the oldest the kernels support; install a newer one with: "
        'pip install "triton>=3.5"'
    )
    monkeypatch.setattr(choice, "_OLD_TRITON", [])
    monkeypatch.setattr("importlib.metadata.version", lambda name: {"triton": "3.5.1"}[name])
    assert choice._old_triton_reason() is None
    assert choice._old_triton_reason._dynamo_marked_constant is True  # Dynamo calls it for real (no argument)


@pytest.mark.parametrize("found", ["3.2.0", "3.4.1", "3.5.0", "3.5.1", "3.10.0"])
def test_the_kernels_import_refuses_an_old_triton_in_one_line(found):
    """``import transformer.kernels`` beside a triton older than 3.5: ImportError naming both versions; 3.5 (what
    torch 2.9 pins) and newer import."""
    import transformer.kernels

    source = Path(transformer.kernels.__file__).parent / "_triton_version.py"  # kernels/, or inside the package
    code = (
        "import sys, types\n"
        f"sys.modules['triton'] = types.SimpleNamespace(__version__={found!r})\n"
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('k', {str(source)!r},"
        " submodule_search_locations=[])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "try:\n    spec.loader.exec_module(module)\n    print('imported')\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.strip()
    old = found.startswith(("3.2.", "3.4."))
    assert out == (
        f"transformer.kernels needs triton >= 3.5, found triton {found}; install a newer one with: "
        'pip install "triton>=3.5"'
        if old
        else "imported"
    )


def _a_kernel(x):  # a Python function with a source file, as JITFunction requires
    pass


def test_an_interpreted_kernel_is_launched_as_it_is_and_a_jit_one_through_wrap_triton(monkeypatch):
    """torch 2.9's ``wrap_triton`` refuses an ``InterpretedFunction`` (``TRITON_INTERPRET=1``): the op's body passes
    those as they are, and only a real ``triton.jit`` function (alone or autotuned) through ``wrap_triton``."""
    pytest.importorskip("triton")
    from triton.runtime.jit import JITFunction

    from transformer.kernels import _op

    wrapped = []
    monkeypatch.setattr(_op, "wrap_triton", lambda kernel: wrapped.append(kernel) or ("wrapped", kernel))

    class Interpreted:  # what TRITON_INTERPRET=1 makes of a @triton.jit function
        pass

    jit = JITFunction(_a_kernel)  # what @triton.jit makes without the interpreter (it has .fn too)
    autotuned = type("Autotuner", (), {"fn": jit})()
    interpreted = Interpreted()
    autotuned_interpreted = type("Autotuner", (), {"fn": interpreted})()
    assert _op._traceable(interpreted) is interpreted
    assert _op._traceable(autotuned_interpreted) is autotuned_interpreted
    assert _op._traceable(jit) == ("wrapped", jit) and _op._traceable(autotuned) == ("wrapped", autotuned)
    assert wrapped == [jit, autotuned]


_HANDED_ON = r"""
import torch, transformer as T
from transformer.common import graph_errors
from transformer.contracts import CompiledContractError, Float, Tensor, checked
graph_errors._INDEX_ERROR_PASSES = False  # as before torch 2.13: only Dynamo's Unsupported passes unchanged

@checked
def f(x: Float[Tensor, "b 3"]) -> Float[Tensor, "b 3"]:
    return x * 2

try:
    f(torch.ones(2, 5))
except T.TypeCheckError as error:
    eager = str(error).splitlines()[0]
compiled = torch.compile(f, fullgraph=True, backend="eager")
assert torch.equal(compiled(torch.ones(2, 3)), torch.full((2, 3), 2.0))
try:
    compiled(torch.ones(2, 5))
    raise SystemExit("accepted")
except CompiledContractError as error:
    from torch._dynamo.exc import Unsupported
    assert type(error) is CompiledContractError and isinstance(error, Unsupported), type(error).__mro__
    lines = str(error).splitlines()
    assert lines[0] == eager, (lines[0], eager)
    assert "from user code" not in str(error) and "TORCHDYNAMO_VERBOSE" not in str(error), str(error)
print("ok")
"""


def test_before_torch_2_13_a_compiled_violation_is_still_the_contract_error_with_its_own_message():
    """Dynamo before torch 2.13 hands on from a fake implementation only its own ``Unsupported``: the error class
    gets it as one more base, so the caller still catches ``CompiledContractError`` itself (``type(e) is``) with
    eager's first line, and without the trace Dynamo appends to the message of an ``Unsupported``. Here, on this
    torch, with the newer route switched off; at the floor and GPU points for real (scripts/compat.py)."""
    proc = subprocess.run([sys.executable, "-c", _HANDED_ON], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]


def test_the_descriptor_path_under_the_interpreter_follows_the_triton_version():
    """Triton 3.4 and 3.5's interpreter checks a descriptor's strides in elements: there the CPU reads through
    pointers; from 3.6 on through descriptors too (both paths then run under the interpreter)."""
    pytest.importorskip("triton")
    import triton

    from transformer.kernels import _tuning

    assert _tuning._HAS_DESCRIPTORS  # every supported triton has tl.make_tensor_descriptor (3.4 and later)
    assert [_tuning.interpreted_descriptors(v) for v in [(3, 4), (3, 5), (3, 6), (3, 9), (4, 0)]] == [
        False,
        False,
        True,
        True,
        True,
    ]
    installed = tuple(int(p) for p in triton.__version__.split(".")[:2])
    assert _tuning.tma_enabled(torch.device("cpu")) is _tuning.interpreted_descriptors(installed)


def test_the_interpreter_numpy_reason_is_asked_once_whatever_the_answer(monkeypatch):
    """Installed versions do not change while running: the interpreter's NumPy check reads the metadata once, when it
    finds no problem as when it finds one (it runs on every CPU launch's support check), and Dynamo takes its
    answer as a constant."""
    pytest.importorskip("triton")
    from transformer.kernels import _validate

    for answer in (None, "the Triton 3.6.0 interpreter fails with NumPy 2.4.6 (...)"):
        asked = []
        monkeypatch.setattr(_validate, "_OLD_INTERPRETER", [])
        monkeypatch.setattr(
            _validate, "_ask_old_interpreter", lambda answer=answer, asked=asked: asked.append(1) or answer
        )
        assert [_validate._old_interpreter_reason() for _ in range(3)] == [answer] * 3
        assert asked == [1]
    assert _validate._old_interpreter_reason._dynamo_marked_constant is True


def test_the_gpu_script_dry_run_fails_on_a_failed_check_or_a_stage_cut_short_but_the_sweep():
    compat = _compat()

    def stage(name, timed_out=False):
        return {"check": "stage", "stage": name, "rc": 124 if timed_out else 0, "timed_out": timed_out}

    def summary(failed=0):
        return {"check": "stage", "stage": "summary", "failed_checks": failed, "sweep_cases": 62, "timed_out_stages": 0}

    good = [stage("environment"), stage("install"), stage("sweep", timed_out=True), summary()]
    assert compat.dry_run_verdict(0, good) == {
        "ok": True,
        "stages_cut_short": ["sweep"],
        "failed_checks": 0,
        "sweep_cases": 62,
    }
    assert not compat.dry_run_verdict(0, [stage("tests", timed_out=True), summary()])["ok"]
    assert not compat.dry_run_verdict(0, [stage("sweep"), summary(failed=1)])["ok"]
    assert not compat.dry_run_verdict(1, good)["ok"]
    assert not compat.dry_run_verdict(0, good[:-1])["ok"]  # no summary: the script stopped before its end
    assert not compat.dry_run_verdict(0, [])["ok"]
