"""docs/cli.md promises to be what every command's ``--help`` says, option by option: the page equals what
``scripts/cli_reference.py`` reads from the parsers now, and it covers every option of every parser (so a help text,
a default, a group title or a closing line changed in the code without the page -- or the reverse -- fails here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# The repository root: tests/'s parent, or further up where a tool runs a copy of tests/ in a subfolder (mutmut's
# mutants/ holds the package and tests only).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "scripts" / "cli_reference.py").exists())


def _script():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_is_what_the_parsers_say():
    assert (ROOT / "docs" / "cli.md").read_text() == _script().render(), "run python scripts/cli_reference.py"


def test_the_cli_page_names_every_option_of_every_command_with_its_filled_in_help():
    script = _script()
    page = (ROOT / "docs" / "cli.md").read_text()
    seen = 0
    for name, parser in script._parsers():
        section = page.split(f"## `{name}`\n", 1)[1].split("\n## `", 1)[0]
        for action in parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}" in section, (name, flag)
                seen += 1
            if action.help and "%(default)s" in action.help:
                assert f"default: {action.default}" in section, (name, action.dest, action.default)
    assert seen > 100 and "%(" not in page
