"""Blind review of distributed training (transformer/distributed, trainer/cli rank handling) (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-dist-rank-bound",
        "transformer/distributed/world.py",
        (("    if not 0 <= rank < world_size:\n", "    if not 0 <= rank <= world_size:\n"),),
        "torchrun_world accepts RANK == WORLD_SIZE (e.g. RANK=2, WORLD_SIZE=2) instead of raising "
        "DistributedSetupError naming RANK, although its own message says RANK must be in [0, WORLD_SIZE)",
    ),
    Mutant(
        "blind-dist-shard-last-label",
        "transformer/distributed/sharding.py",
        (
            (
                "        tgt = torch.cat([batch.tgt[part], batch.tgt_y[part, -1:]], dim=1)  # the full target: decoder input + last label\n",
                "        tgt = torch.cat([batch.tgt[part], batch.tgt[part, -1:]], dim=1)  # the full target: decoder input + last label\n",
            ),
        ),
        "shard_batch rebuilds each rank's target from the decoder input plus the input's last token instead of "
        "the last label: every rank's rows lose their final label (tgt_y's last column repeats the one before), "
        "so the ranks together no longer train on the global batch one process would",
    ),
    Mutant(
        "blind-dist-eval-floor-rounds",
        "transformer/distributed/strategy.py",
        (
            (
                "        rounds = -(-len(batches) // self.world_size)\n",
                "        rounds = len(batches) // self.world_size\n",
            ),
        ),
        "evaluation under torchrun drops the last len(batches) % N evaluation batches (floor instead of ceiling "
        "of the rounds), so the held-out loss is not that of the whole evaluation set",
    ),
    Mutant(
        "blind-dist-reseed-no-rank",
        "transformer/distributed/strategy.py",
        (
            (
                '        own["torch_rng"] = torch.Generator().manual_seed(1_000_003 * int(state["step"]) + self.rank).get_state()\n',
                '        own["torch_rng"] = torch.Generator().manual_seed(1_000_003 * int(state["step"])).get_state()\n',
            ),
        ),
        "resuming on another world size (or from a one-process checkpoint) gives every rank the same dropout "
        "stream: it is re-derived from the step only, not from the step and the rank",
    ),
    Mutant(
        "blind-dist-nosync-first",
        "transformer/training/trainer.py",
        (
            (
                "            with self.strategy.no_sync(self.train_model, last=i == len(group) - 1):  # gradients synced once a step\n",
                "            with self.strategy.no_sync(self.train_model, last=i == 0):  # gradients synced once a step\n",
            ),
        ),
        "with accum_iter > 1 under DDP the gradients are all-reduced in the first micro-batch's backward and the "
        "later micro-batches run in no_sync, so their gradients are never averaged: the replicas diverge and the "
        "weights differ from one process's",
    ),
    Mutant(
        "blind-dist-fsdp-load-param-groups",
        "transformer/distributed/fsdp.py",
        (
            (
                '            optim_state_dict={"state": merged, "param_groups": saved["param_groups"]},\n',
                '            optim_state_dict={"state": merged, "param_groups": optim_state["param_groups"]},\n',
            ),
        ),
        "resuming a sharded (FSDP) checkpoint keeps the fresh optimizer's hyper-parameters instead of the saved "
        "ones: the learning rate of the first step after the resume is the schedule's initial one, so the resume "
        "is no longer bit-exact",
    ),
    Mutant(
        "blind-dist-state-not-hashed",
        "transformer/distributed/sharded_checkpoint.py",
        (
            (
                "    files = [CONFIG_FILE, STATE_TENSORS_FILE, STATE_JSON_FILE, *sorted(assets)] + sorted(\n",
                "    files = [CONFIG_FILE, STATE_JSON_FILE, *sorted(assets)] + sorted(\n",
            ),
        ),
        "a sharded checkpoint's meta.json has no SHA-256 for state.safetensors (RNG states, optimizer tensors of "
        "the trainer state): a corrupted state.safetensors is resumed from instead of being refused by name",
    ),
    Mutant(
        "blind-dist-restart-count-zero",
        "transformer/distributed/launch.py",
        (
            (
                "    return world is not None and world.restart_count > 0 and find_checkpoint(out) is not None\n",
                "    return world is not None and world.restart_count >= 0 and find_checkpoint(out) is not None\n",
            ),
        ),
        "restarted_with_checkpoint is true on a first attempt too (restart count 0, and the one-process World()): "
        '`train` without --resume into an --out that holds a checkpoint silently resumes it ("restart 0: resumed '
        'from ... at step N") and trains nothing more, instead of starting again',
    ),
    Mutant(
        "blind-dist-bar-every-rank",
        "transformer/training/trainer.py",
        (
            (
                '        bar = make_progress_bar(target, "train", cfg.progress and self.strategy.is_main, initial=self.step)\n',
                '        bar = make_progress_bar(target, "train", cfg.progress, initial=self.step)\n',
            ),
        ),
        "under torchrun every rank draws its own progress bar on stderr, not rank 0 alone",
    ),
    Mutant(
        "blind-dist-batch-size-message",
        "transformer/cli/train.py",
        (
            (
                '            batch_size, world.world_size, "--batch-size" if given else f"the {task.name} task\'s batch size"\n',
                '            batch_size, world.world_size, "--batch-size" if not given else f"the {task.name} task\'s batch size"\n',
            ),
        ),  # re-targeted after run safety
        "an indivisible --batch-size under torchrun is reported as \"the copy task's batch size 16 is not "
        'divisible..." and an indivisible task default as "--batch-size 80 ...": the error names the wrong '
        "argument",
    ),
]

# The files run for this review (its first run and after).
SUITE = (
    "tests/test_distributed_setup.py",
    "tests/test_distributed_laws.py",
    "tests/test_distributed_cli.py",
    "tests/test_training.py",
    "tests/test_cli.py",
    "tests/test_checkpoint.py",
    "tests/test_run_safety_disk.py",  # test_run_safety.py's part that catches blind-dist-restart-count-zero (issue 26)
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
