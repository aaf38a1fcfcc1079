"""The mutant catalog (tests/mutation/catalog/) stays runnable: every edit's ``old`` text occurs exactly once in its
file (``run_mutants.check_targets``), for every catalog module, listed in ``ALL`` or not. A refactor that makes a
mutant stale fails here, not at the next mutation run. ``KNOWN_STALE``: mutants allowed to be
stale (none since the 41 of 2026-12-02 were retargeted): it may only shrink."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

MUTATION = Path(__file__).resolve().parent / "mutation"
sys.path.insert(0, str(MUTATION))

import catalog  # noqa: E402
from run_mutants import check_targets  # noqa: E402

KNOWN_STALE: set[str] = set()


def _every_mutant():
    for module in pkgutil.iter_modules(catalog.__path__):
        if module.name != "base":
            yield from getattr(importlib.import_module(f"catalog.{module.name}"), "MUTANTS", [])


def test_every_mutant_of_the_catalog_targets_text_that_occurs_exactly_once():
    mutants = list(_every_mutant())
    assert len(mutants) > 800
    stale = {m.id: problem for m in mutants for problem in check_targets([m])}
    new = {i: p for i, p in stale.items() if i not in KNOWN_STALE}
    assert not new, "stale mutants (retarget them to the code's new text):\n" + "\n".join(new.values())
    fixed = KNOWN_STALE - set(stale)
    assert not fixed, f"no longer stale: remove from KNOWN_STALE: {sorted(fixed)}"


def test_the_check_finds_a_stale_mutant(tmp_path):
    from catalog import M

    (tmp_path / "x.py").write_text("a = 1\na = 1\n")
    assert check_targets([M("m", str(tmp_path / "x.py"), "b = 2", "b = 3", "")])  # absent
    assert check_targets([M("m", str(tmp_path / "x.py"), "a = 1", "a = 2", "")])  # twice
    assert not check_targets([M("m", str(tmp_path / "x.py"), "a = 1\na", "a = 2\na", "")])
