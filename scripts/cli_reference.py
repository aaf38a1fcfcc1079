"""Write docs/cli.md, the command line's reference: for the program, every command and every task of ``train``, what
its ``--help`` says -- the description, each argument group with each option's flags and help (its ``%(default)s``
filled in, as argparse fills it), and the closing text -- read from the parsers themselves, as markdown tables (not
argparse's formatting, which changes between Python versions). ``python scripts/cli_reference.py`` writes it;
``--check`` exits 1 when the page differs from the parsers, as tests/test_cli_reference.py does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"

INTRO = """# Command line reference

What every command's `--help` says, option by option. This page is written by
`python scripts/cli_reference.py` from the parsers themselves, and a test (`tests/test_cli_reference.py`) fails when
it differs from what they print: the page and `--help` cannot drift apart. What the commands do, with examples, is in
[Training](training.md), [Language model](lm.md), [Decoding](decoding.md), [Your own data](data.md) and
[Distributed training](distributed.md); what each exit status means is at the end of every `--help`.
"""


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    from transformer.cli import build_parser

    parser = build_parser()
    found = [("typed-transformer", parser)]
    found += [(f"typed-transformer {name}", sub) for name, sub in parser.command_parsers.items()]
    found += [(f"typed-transformer train {name}", sub) for name, sub in parser.task_parsers.items()]
    return found


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """``action.help`` with its ``%(...)s`` filled in as argparse's HelpFormatter fills it."""
    params = {k: v for k, v in dict(vars(action), prog=parser.prog).items() if v is not argparse.SUPPRESS}
    params = {k: getattr(v, "__name__", v) for k, v in params.items()}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return (action.help or "") % params


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices else None)
    value = f" {metavar or action.dest.upper()}" if takes else ""
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _required(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """What argparse refuses to run without: a required option, or one option of a required exclusive group."""
    if action.option_strings and action.required:
        return "**required**; "
    for group in parser._mutually_exclusive_groups:
        if group.required and action in group._group_actions:
            names = " or ".join(f"`{a.option_strings[0]}`" for a in group._group_actions)
            return f"**required**: {names}; "
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section(name: str, parser: argparse.ArgumentParser) -> str:
    lines = [f"## `{name}`", ""]
    if parser.description:
        lines += [parser.description.strip(), ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help is not argparse.SUPPRESS]
        if not actions:
            continue
        lines += [f"**{group.title}**", ""]
        if group.description:
            lines += [_cell(group.description), ""]
        lines += ["| argument | what it does |", "|---|---|"]
        lines += [f"| {_flags(a)} | {_required(parser, a)}{_cell(_help(parser, a))} |" for a in actions]
        lines.append("")
    if parser.epilog:
        lines += [_cell(parser.epilog), ""]
    return "\n".join(lines)


def render() -> str:
    """The page: one section per command."""
    return "\n".join([INTRO, *(_section(name, parser) for name, parser in _parsers())])


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md differs from the parsers' help")
    check = args.parse_args(argv).check
    text = render()
    if check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/cli.md is up to date" if same else "docs/cli.md differs from --help: run scripts/cli_reference.py")
        return 0 if same else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
