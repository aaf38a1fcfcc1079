"""Run PyTorch's own tests of ``F.scaled_dot_product_attention`` against the drop-in: pytest on a test file (torch's
``test/test_transformers.py`` from a PyTorch checkout at the installed version's tag) with
``torch.nn.functional.scaled_dot_product_attention`` replaced by ``transformer.scaled_dot_product_attention`` (on
``--backend``, through ``use_backend``), and a JSON summary of the outcomes per test class.

By hand (not in the suite: torch's file needs its own test dependencies and minutes)::

    git -C pytorch show v2.13.0:test/test_transformers.py > /tmp/test_transformers.py
    python benchmarks/torch_sdpa_tests.py /tmp/test_transformers.py --backend eager -k "CPU" \
        --json benchmarks/results/differential/torch_tests.json

docs/integrations.md ("Checked against torch's function") lists each remaining difference and its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

import pytest


class _DropIn:
    """A pytest plugin: the drop-in replaces torch's function for the whole session; outcomes recorded per class."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.failures: dict[str, str] = {}

    def pytest_sessionstart(self, session):
        import torch.nn.functional as F

        import transformer as tt

        self._torch = F.scaled_dot_product_attention
        self._block = tt.use_backend(self.backend)
        self._block.__enter__()
        F.scaled_dot_product_attention = tt.scaled_dot_product_attention

    def pytest_sessionfinish(self, session):
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self._torch
        self._block.__exit__(None, None, None)

    def pytest_runtest_logreport(self, report):
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        cls = report.nodeid.split("::")[1] if "::" in report.nodeid else "<module>"
        self.outcomes[cls][report.outcome] += 1
        if report.outcome == "failed":
            self.failures[report.nodeid] = str(report.longrepr).strip().splitlines()[-1][:300]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file")
    parser.add_argument("--backend", default="auto", choices=("auto", "eager", "torch", "triton"))
    parser.add_argument("-k", dest="keyword", default=None)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    plugin = _DropIn(opts.backend)
    args = [opts.test_file, "-q", "-p", "no:cacheprovider"] + (["-k", opts.keyword] if opts.keyword else [])
    code = pytest.main(args, plugins=[plugin])
    import torch

    result = {
        "test_file": opts.test_file,
        "backend": opts.backend,
        "keyword": opts.keyword,
        "torch": torch.__version__,
        "exit_code": int(code),
        "by_class": {cls: dict(counts) for cls, counts in sorted(plugin.outcomes.items())},
        "failures": plugin.failures,
    }
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(json.dumps(result["by_class"], indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["exit_code"] in (0, 1) else 2)
