"""Run PyTorch's own tests of ``F.scaled_dot_product_attention`` against the drop-in: pytest on a test file (torch's
``test/test_transformers.py``) with ``torch.nn.functional.scaled_dot_product_attention`` replaced by
``transformer.scaled_dot_product_attention`` (on ``--backend``, through ``use_backend``; ``--backend none`` runs
torch's own function, to know which tests torch itself passes), and a JSON summary: the test file's commit, date,
versions, outcomes per test class, and each failing test with its last error line (``--compare`` a torch-alone
summary adds the tests torch passes that fail here: the differences).

By hand, not in the suite (torch's file needs its own test dependencies and minutes). torch's file is not part of
this repository and must not be committed: put it in /tmp, from a PyTorch checkout (``git -C pytorch show
<commit>:test/test_transformers.py > /tmp/torch_sdpa/test_transformers.py``) or, without one, as the stored copy
read page by page (the commit used for the committed results is in their JSON, ``source``). It imports only
``torch.testing._internal`` (shipped with torch) and needs ``pip install expecttest``::

    python benchmarks/torch_sdpa_tests.py /tmp/torch_sdpa/test_transformers.py --backend none -k CPU \
        --source pytorch/pytorch@<commit> --json benchmarks/results/differential/torch_tests_none.json
    python benchmarks/torch_sdpa_tests.py /tmp/torch_sdpa/test_transformers.py --backend eager -k CPU \
        --source pytorch/pytorch@<commit> --compare benchmarks/results/differential/torch_tests_none.json \
        --json benchmarks/results/differential/torch_tests_eager.json

(the same with ``--backend torch``; ``--backend triton`` under ``TRITON_INTERPRET=1``). docs/integrations.md
("Checked against torch's function") lists each remaining difference and its reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest


class _DropIn:
    """A pytest plugin: the drop-in replaces torch's function for the whole session; outcomes recorded per class."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.failures: dict[str, str] = {}
        self.passed: list[str] = []

    def pytest_sessionstart(self, session):
        if self.backend == "none":  # torch's own function: the baseline
            return
        import torch.nn.functional as F

        import transformer as tt

        self._torch = F.scaled_dot_product_attention
        self._block = tt.use_backend(self.backend)
        self._block.__enter__()
        F.scaled_dot_product_attention = tt.scaled_dot_product_attention

    def pytest_sessionfinish(self, session):
        if self.backend == "none":
            return
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self._torch
        self._block.__exit__(None, None, None)

    def pytest_runtest_logreport(self, report):
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        cls = report.nodeid.split("::")[1] if "::" in report.nodeid else "<module>"
        self.outcomes[cls][report.outcome] += 1
        if report.outcome == "passed":
            self.passed.append(report.nodeid)
        if report.outcome == "failed":
            self.failures[report.nodeid] = _last_error(report)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file")
    parser.add_argument("--backend", default="auto", choices=("none", "auto", "eager", "torch", "triton"))
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--source", default=None, help="where the test file comes from (repo@commit)")
    parser.add_argument("--compare", default=None, help="a --backend none summary: list the tests it passes")
    opts = parser.parse_args(argv)
    plugin = _DropIn(opts.backend)
    args = [opts.test_file, "-q", "-p", "no:cacheprovider"] + (["-k", opts.keyword] if opts.keyword else [])
    code = pytest.main(args, plugins=[plugin])
    result = {
        "test_file": Path(opts.test_file).name,
        "source": opts.source,
        "backend": opts.backend,
        "keyword": opts.keyword,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": _versions(),
        "exit_code": int(code),
        "totals": {k: sum(c.get(k, 0) for c in plugin.outcomes.values()) for k in ("passed", "failed", "skipped")},
        "by_class": {cls: dict(counts) for cls, counts in sorted(plugin.outcomes.items())},
        "failures": plugin.failures,
        "passed": sorted(plugin.passed),
    }
    if opts.compare:
        base = json.loads(Path(opts.compare).read_text())
        passed_there = set(base["passed"])
        result["compared_with"] = {"backend": base["backend"], "totals": base["totals"]}
        result["differences"] = {t: e for t, e in plugin.failures.items() if t in passed_there}
        result["passes_where_compared_fails"] = sorted(set(plugin.passed) & set(base["failures"]))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(json.dumps(result["by_class"], indent=1))
    return result


def _last_error(report) -> str:
    """The failure's line in the test file and the first line of its exception (pytest's crash summary)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None:
        return str(report.longrepr).strip().splitlines()[-1][:300]
    message = crash.message.strip().splitlines()[0] if crash.message.strip() else ""
    return f"{Path(crash.path).name}:{crash.lineno}: {message}"[:300]


def _versions() -> dict[str, str]:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        pass
    here = Path(__file__).resolve().parent
    git = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"], capture_output=True, text=True)
    out["typed-transformer"] = git.stdout.strip() or "unknown"
    return out


if __name__ == "__main__":
    sys.exit(0 if main()["exit_code"] in (0, 1) else 2)
