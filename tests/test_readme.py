"""The README's tour runs as written, its errors are the errors raised, CI runs its two set-up commands, the test
command installs every extra, and no link of the README (the wheel's description) is relative."""

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
_spec = importlib.util.spec_from_file_location("readme_setup", README.parent / "scripts" / "readme_setup.py")
readme_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_setup)


def _tour_lines() -> list[str]:
    text = README.read_text()
    block = text.split("## A tour", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    return block.strip("\n").splitlines()


def test_readme_tour_runs_and_its_errors_are_real(monkeypatch):
    monkeypatch.delenv("TYPED_TRANSFORMER_CHECKS", raising=False)
    # as in a new process: earlier tests' graphs of the same methods count toward Dynamo's recompile limit
    torch._dynamo.reset()
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
            # the error shown, or a subclass of it (a compiled contract raises CompiledContractError, a TypeCheckError)
            assert name in [cls.__name__ for cls in type(info.value).__mro__], type(info.value).__mro__
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
    assert expected_errors == 3  # the config error, the eager and the compiled contract error
    assert namespace["log_probs"].shape == (1, 3, 11)


# ---------------------------------------------------------------- the two set-up commands and CI


def test_readme_has_exactly_two_setup_commands_and_ci_runs_both_as_written():
    commands = readme_setup.setup_commands(README.read_text())
    assert (
        commands["main"] == 'pip install "torch==2.13.0" && pip install -e ".[triton]" && typed-transformer train copy'
    )
    assert commands["tests"].endswith("python -m pytest -q") and ".[triton,text,hf,dev]" in commands["tests"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python scripts/readme_setup.py fresh-main-job" in ci
    assert "$(python scripts/readme_setup.py print tests)" in ci and 'bash -o pipefail -ec "$test_command"' in ci


def test_the_test_command_installs_every_extra_and_the_main_job_only_triton():
    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    commands = readme_setup.setup_commands(README.read_text())
    installed = {name: set(re.search(r'-e "\.\[([\w,]+)\]"', commands[name])[1].split(",")) for name in commands}
    assert installed["tests"] == set(extras), sorted(set(extras) ^ installed["tests"])
    assert installed["main"] == {"triton"}  # the core install: no tokenizers, no sacrebleu (fresh-main-job checks)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)|<a\s[^>]*href=\"([^\"]+)\"|^\[[^\]]+\]:\s*(\S+)", re.M)


def relative_links(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that are neither absolute URLs nor anchors of the same page."""
    targets = [next(g for g in match.groups() if g) for match in LINK.finditer(markdown)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_readme_has_no_relative_link_it_is_the_wheels_description_too():
    assert relative_links(README.read_text()) == []
    planted = 'See [the docs](docs/index.md), <a href="notebooks/">these</a> and [ok](https://x.org)\n'
    planted += "[here](#a-tour).\n[ref]: docs/install.md\n"
    assert relative_links(planted) == ["docs/index.md", "notebooks/", "docs/install.md"]


def test_setup_section_with_a_third_or_multi_line_command_is_refused():
    text = README.read_text()
    section_end = text.index("## A tour")
    extra = text[:section_end] + "```bash\npip install foo\n```\n\n" + text[section_end:]
    with pytest.raises(ValueError, match="exactly two one-line bash commands"):
        readme_setup.setup_commands(extra)
    with pytest.raises(ValueError, match="no '## Set up' section"):
        readme_setup.setup_commands(text.replace("## Set up", "## Install"))


GOOD_RUN = """train: 100%|##########| 600/600
  '1 2 3 4 5 6 7 8 9 10' -> '1 2 3 4 5 6 7 8 9 10'
exact match on 500 held-out inputs: 100.0%
"""


@pytest.mark.parametrize(
    "output, problem",
    [
        (GOOD_RUN, None),
        (GOOD_RUN.replace("100.0%", "97.4%"), "exact match 97.4% is below 99.0%"),
        (GOOD_RUN.replace("exact match on", "matched"), "no line 'exact match on N held-out inputs: X%'"),
        (GOOD_RUN.replace("-> '1 2 3 4 5 6 7 8 9 10'", "-> '1 2 3 4 5 6 7 8 9 9'"), "the demo decode"),
        (
            "/venv/torch/_subclasses/functional_tensor.py:279: UserWarning: Failed to initialize NumPy\n" + GOOD_RUN,
            "warnings in the output",
        ),
        (
            "W1123 10:05:48.295000 4851 torch/_library/triton.py:53] Triton not available\n" + GOOD_RUN,
            "warnings in the output",
        ),
    ],
)
def test_main_job_output_check(output, problem):
    found = readme_setup.check_main_job_output(output)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


def test_the_core_install_check_names_every_package_of_the_text_and_hf_extras():
    """fresh-main-job's check of the core install (CORE_ONLY, run in the brand-new venv) fails, naming them, where
    tokenizers, sacrebleu or transformers are importable: run here, where the dev install has all three."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", readme_setup.CORE_ONLY], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "['tokenizers', 'sacrebleu', 'transformers']" in proc.stderr
