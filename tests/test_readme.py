"""The README's tour runs as written, and the errors it shows are the errors raised."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _tour_lines() -> list[str]:
    text = README.read_text()
    block = text.split("## A tour", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    return block.strip("\n").splitlines()


def test_readme_tour_runs_and_its_errors_are_real(monkeypatch):
    monkeypatch.delenv("TYPED_TRANSFORMER_CHECKS", raising=False)
    lines = _tour_lines()
    namespace: dict = {}
    i = 0
    expected_errors = 0
    while i < len(lines):
        line = lines[i]
        follow = lines[i + 1] if i + 1 < len(lines) else ""
        shown = re.match(r"# (\w+Error): (.*)", follow)
        if shown and not line.startswith("#"):
            name, message = shown.groups()
            prefix = message.split("(...)")[0].split("...")[0].strip()
            with pytest.raises(Exception) as info:
                exec(line, namespace)
            assert type(info.value).__name__ == name
            assert prefix in str(info.value), (prefix, str(info.value)[:300])
            expected_errors += 1
            i += 2
            continue
        block = [line]
        while i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")):
            i += 1
            block.append(lines[i])
        exec("\n".join(block), namespace)
        i += 1
    assert expected_errors == 2
    assert namespace["log_probs"].shape == (1, 3, 11)
