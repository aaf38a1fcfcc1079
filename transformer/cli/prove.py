"""``typed-transformer prove PACKAGE.MODULE:FACTORY`` (or ``CHECKPOINT_DIR``): prove a model's contracts for every
size in ranges and print the report (:func:`transformer.proofs.prove`, docs/proved-shapes.md). Exit status 0 proved,
1 a counterexample (or a program that could not be traced), 2 bad input."""

from __future__ import annotations

import argparse
import importlib
import os

from .errors import UsageError

PROVE_EPILOG = (
    "exit status: 0 every contract proved for every size in the ranges; 1 a counterexample (or the model could not "
    "be traced); 2 a problem with the command line or its inputs (one line on stderr)"
)


def add_prove_parser(sub) -> argparse.ArgumentParser:
    """The ``prove`` command on the sub-parsers ``sub``."""
    p = sub.add_parser(
        "prove",
        help="prove a model's shape contracts for every size in ranges",
        epilog=PROVE_EPILOG,
        description="Export the model that FACTORY returns with symbolic sizes and checks on, and report, for every "
        "checked call reached, whether its contract holds for every size in the ranges or a counterexample "
        "(docs/proved-shapes.md). FACTORY, called with no arguments, returns a dict with 'target' (a module or a "
        "checked function), 'args' (example inputs), and optionally 'kwargs', 'sizes', 'assume', 'axes' and 'cases' "
        "(as transformer.proofs.prove takes them).",
    )
    p.add_argument(
        "factory",
        metavar="PACKAGE.MODULE:FACTORY",
        help="where the factory is, e.g. mymodels:tiny_lm; or a checkpoint directory written by `train` (its model, "
        "every batch from 1 to 64 and every length from 1 to its max_len, at most 512)",
    )
    p.add_argument(
        "--sizes",
        default=None,
        help="ranges by the contract's dimension names, e.g. batch=1..64,seq=1..512 (default: the factory's 'sizes')",
    )
    p.add_argument(
        "--assume",
        action="append",
        default=[],
        help="a relation taken as given, e.g. 'k_len == seq' (repeat for more; added to the factory's)",
    )
    p.add_argument(
        "--cases",
        action="append",
        default=[],
        help="prove by cases: a relation per case, e.g. --cases 'seq <= 3' --cases 'seq >= 4' (together they must "
        "cover the ranges), or --cases split to split where the model's code branches on a size (default: the "
        "factory's 'cases', else one proof over the ranges)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads for torch (default 1)")
    return p


def _factory(spec: str):
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"{spec!r} is not PACKAGE.MODULE:FACTORY (say mymodels:tiny_lm)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"cannot import {module_name!r}: {error}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"{module_name!r} has no {attribute!r}") from None


def _checkpoint(path: str) -> dict:
    from ..checkpoint import load_checkpoint
    from ..proofs.examples import examples_for

    model = load_checkpoint(path, load_trainer_state=False).model.eval()
    try:
        return examples_for(model)
    except ValueError as error:
        raise UsageError(str(error)) from None


def run_prove(args: argparse.Namespace) -> int:
    """Build the model with the factory, prove it over the ranges, print the report; the exit status."""
    from ..proofs import prove
    from ..proofs.sizes import parse_sizes

    if os.path.isdir(args.factory):
        made = _checkpoint(args.factory)
    else:
        made = _factory(args.factory)()
    if not isinstance(made, dict) or "target" not in made or "args" not in made:
        raise UsageError(f"{args.factory} must return a dict with 'target' and 'args', got {type(made).__name__}")
    try:
        sizes = parse_sizes(args.sizes) if args.sizes is not None else made.get("sizes")
        if not sizes:
            raise UsageError("no ranges: give --sizes batch=1..64,seq=1..512 or 'sizes' from the factory")
        report = prove(
            made["target"],
            *made["args"],
            sizes=sizes,
            assume=[*made.get("assume", ()), *args.assume],
            axes=made.get("axes"),
            cases=args.cases or made.get("cases", ()),
            **made.get("kwargs", {}),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(report)
    return report.exit_code
