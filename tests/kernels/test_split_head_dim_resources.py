"""The sm_90 compile check of the head-dim split (benchmarks/kernel_split_head_dim.py, issue 27) as committed in
benchmarks/results/: power-of-two head_dims compile to the code of before, every config of every kernel is covered at
80 and 96, and kernels/_head_dim.py splits by default exactly the kernels whose figures pay (docs/kernels.md,
"head_dim 80 and 96"). Separate from test_split_head_dim.py, which runs the kernels (and the mutants of
tests/mutation/catalog/kernel_split_head_dim.py, whose copies hold no benchmarks/)."""

import importlib.util
import itertools
import json
import pathlib

from transformer.kernels import _head_dim, _tuning

ROOT = pathlib.Path(__file__).resolve().parents[2]
TUNING_NAME = {"forward": "forward", "forward, pointers": "forward", "forward split-KV": "split", "dk/dv": "dkdv"}


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_power_of_two_head_dims_compile_to_the_code_of_before():
    """The committed comparison with main before the split (6c07c8b): every kernel's default config at head_dim 64
    and 128, switches off, causal and all on: the same registers, spilled bytes, shared memory and SASS count."""
    script = _script("kernel_refactor_resources")
    data = json.loads((ROOT / "benchmarks/results/kernel_split_head_dim_unchanged.json").read_text())
    after = {script.key(row): row for row in data["rows"]}
    before = {script.key(row): row for row in data["before"]}
    assert set(after) == set(before) == set(itertools.product(script.KERNEL_NAMES, (64, 128), script.FLAG_SETS))
    changed = {key: field for key in after for field in script.FIELDS if after[key][field] != before[key][field]}
    assert changed == {}


def test_the_compile_check_covers_every_config_and_the_launcher_follows_its_decision():
    """Every config of every kernel at 80 and 96, padded and split; the shared-memory estimate (which prunes configs)
    is never below the compiler's figure; the recorded decision is the script's rule applied to the rows; and
    kernels/_head_dim.py splits by default exactly the kernels whose every compiled variant pays at 80 and 96."""
    script = _script("kernel_split_head_dim")
    data = json.loads((ROOT / "benchmarks/results/kernel_split_head_dim.json").read_text())
    rows = data["rows"]
    configs = {
        name: [f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}x{c.num_warps}x{c.num_stages}" for c in configs]
        for name, configs in _tuning.KERNEL_CONFIGS.items()
    }
    expected = {
        (kernel, head_dim, config, tile)
        for kernel in script.KERNEL_NAMES
        for head_dim in script.HEAD_DIMS
        for config in configs[TUNING_NAME.get(kernel, kernel)]
        for tile in ("padded", "split")
    }
    assert {(r["kernel"], r["head_dim"], r["config"], r["tile"]) for r in rows} == expected
    assert all(r["estimate_bytes"] >= r["shared_bytes"] for r in rows)
    decision = {(d["kernel"], d["head_dim"]): (d["split_pays"], d["against"]) for d in data["decision"]}
    assert decision == {key: (pays, reasons) for key, (pays, reasons) in script.decide(rows).items()}
    pays = {TUNING_NAME.get(kernel, kernel) for kernel in script.KERNEL_NAMES}
    for (kernel, _), (split_pays, _) in decision.items():
        if not split_pays:
            pays.discard(TUNING_NAME.get(kernel, kernel))
    assert _head_dim.SPLIT_BY_DEFAULT == pays
    assert _head_dim.SPLIT_HEAD_DIMS == set(script.HEAD_DIMS)
