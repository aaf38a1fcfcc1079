"""Mutants of distributed training (DDP, FSDP2, sharded data, distributed checkpoints, the CLI under torchrun).

Each runs tests/test_distributed_*.py only (it launches torchrun with gloo on the CPU; about 1.5 minutes unmutated).
"""

from .base import M, Mutant  # noqa: F401

_STRATEGY = "transformer/distributed/strategy.py"
_FSDP = "transformer/distributed/fsdp.py"
_SHARDED = "transformer/distributed/sharded_checkpoint.py"
_LAUNCH = "transformer/distributed/launch.py"
_T = "transformer/training/trainer.py"
_TESTS = ("tests/test_distributed_setup.py", "tests/test_distributed_laws.py", "tests/test_distributed_cli.py")


def D(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, _TESTS)


MUTANTS: list[Mutant] = [
    # --- data
    D(
        "dist-no-shard",
        _STRATEGY,
        "        return (shard_batch(batch, shard) for batch in stream)",
        "        return stream",
        "every rank trains on the whole global batch instead of its 1/world_size of the rows",
    ),
    D(
        "dist-token-weights-ignored",
        _STRATEGY,
        "        return [n * self.world_size / total if total > 0 else 1.0 "
        "for n, total in zip(ntokens, totals, strict=True)]\n",
        "        return [1.0 for n, total in zip(ntokens, totals, strict=True)]\n",
        "each rank's loss per token counts equally: the gradient is a mean of per-rank means, not the global loss's",
    ),
    # --- gradients and the optimizer
    D(
        "dist-all-reduce-on-accumulation-steps",
        _STRATEGY,
        "        return contextlib.nullcontext() if last else train_model.no_sync()\n",
        "        return contextlib.nullcontext()\n",
        "DDP all-reduces the gradients in every micro-batch's backward (no no_sync on accumulation steps)",
    ),
    D(
        "dist-fsdp-optimizer-on-unsharded-params",
        _FSDP,
        '                    group["params"] = [sharded[names[id(p)]] for p in group["params"]]\n',
        '                    group["params"] = list(group["params"])\n',
        "the optimizer keeps the full parameters fully_shard replaced: the sharded model never changes",
    ),
    D(
        "dist-fsdp-no-broadcast",
        _FSDP,
        "                dist.broadcast(tensor.data, src=0)",
        "                pass",
        "FSDP shards each rank's own initial weights: ranks seeded differently give a model nobody initialised",
    ),
    # --- losses and evaluation
    D(
        "dist-train-loss-not-reduced",
        _T,
        "        loss_sum, ntokens, stops = self.strategy.all_reduce_sum([loss_sum, ntokens, float(requested)])\n",
        "        stops = self.strategy.all_reduce_sum([float(requested)])[0]\n",
        "the reported train loss and token count are the rank's own, not the global batch's",
    ),
    D(
        "dist-eval-not-reduced",
        _T,
        "        total_loss, total_tokens = self.strategy.all_reduce_sum([total_loss, total_tokens])\n",
        "",
        "evaluation returns the loss of the rank's own share of the evaluation set",
    ),
    D(
        "dist-eval-counts-padding-forward",
        _STRATEGY,
        "                yield batches[0], False  # a forward whose result is not counted, so the collectives match\n",
        "                yield batches[0], True\n",
        "FSDP's extra forward (run so that every rank makes the same collectives) is counted in the evaluation loss",
    ),
    # --- checkpoints
    D(
        "dist-ddp-save-from-every-rank",
        _STRATEGY,
        "        if self.is_main:  # the replicas are identical: one copy, written by rank 0\n",
        "        if True:\n",
        "every DDP rank writes the same checkpoint directory",
    ),
    D(
        "dist-resume-rank0-rng-everywhere",
        _STRATEGY,
        "            return dict(ranks[self.rank])\n",
        "            return dict(ranks[0])\n",
        "on resume every rank takes rank 0's RNG states: the dropout streams are not the uninterrupted run's",
    ),
    D(
        "dist-sharded-hash-misses-a-shard",
        _SHARDED,
        (
            "        os.path.join(_DCP_DIR, name) for name in os.listdir(os.path.join(tmp, _DCP_DIR))\n"
            "    )\n"
            "    meta = {\n"
        ),
        (
            "        os.path.join(_DCP_DIR, name) for name in os.listdir(os.path.join(tmp, _DCP_DIR))\n"
            "    )[:2]\n"
            "    meta = {\n"
        ),
        "meta.json records the SHA-256 of the metadata and rank 0's shard only: rank 1's shard goes unchecked",
    ),
    D(
        "dist-consolidate-loads-into-a-copy",
        _SHARDED,
        "    state = model.state_dict()  # full tensors, filled in place from every rank's shards\n",
        "    state = {k: v.clone() for k, v in model.state_dict().items()}\n",
        "consolidation loads the shards into copies and saves the freshly initialised model",
    ),
    # --- the command line
    D(
        "dist-restart-not-resumed",
        _LAUNCH,
        (
            "    from ..checkpoint import find_checkpoint\n"
            "\n"
            "    return world is not None and world.restart_count > 0 and find_checkpoint(out) is not None\n"
        ),
        ("\n    return False\n"),
        "after torchrun restarts a failed job, train starts again from step 0 instead of the last checkpoint",
    ),
    D(
        "dist-every-rank-prints",
        "transformer/cli/runtime.py",
        "                main_process_output(world),\n",
        "                main_process_output(None),\n",
        "every rank prints the run's report, not only rank 0",
    ),
]

MUTANTS += [
    # --- other model kinds and batch sources (the language model on file corpora)
    D(
        "dist-shard-keyword-ignored",
        _STRATEGY,
        "        if takes_shard(factory):",
        "        if False:",
        "a shard-aware batch factory is called without its shard: every rank reads the whole corpus",
    ),
    D(
        "dist-sharded-config-without-kind",
        _SHARDED,
        '        json.dump({"kind": model_kind(model.config), **model.config.architecture()}, f, indent=2, sort_keys=True)\n',
        "        json.dump(model.config.architecture(), f, indent=2, sort_keys=True)\n",
        "a sharded checkpoint's config.json omits the model kind: a language model reads back as an encoder-decoder",
    ),
    D(
        "dist-sharded-drops-assets",
        _SHARDED,
        '    assets = dict(getattr(model, "checkpoint_assets", None) or {})\n',
        "    assets = {}\n",
        "a sharded checkpoint leaves out the model's assets: the consolidated language model has no tokenizer",
    ),
]

MUTANTS += [
    # --- train lm / train translate under torchrun (transformer/cli/file_commands.py and the CLI's wiring)
    D(
        "dist-file-task-single-process",
        "transformer/cli/train.py",
        "        return train_file_task(args, strategy.device, strategy)\n",
        "        return train_file_task(args, strategy.device)\n",
        "under torchrun the file tasks train one whole model per rank: no strategy, no shares, every rank saves",
    ),
    D(
        "dist-file-not-distributed",
        "transformer/cli/file_run.py",
        "        trainer.distribute(self.strategy)\n",
        "        pass\n",
        "the file tasks' trainer is never spread over the ranks: each rank trains alone on the whole plan",
    ),
    D(
        "dist-file-every-rank-prepares",
        "transformer/cli/file_run.py",
        "        data = prepare(tokenizer) if self.strategy.is_main else None\n",
        "        data = prepare(tokenizer)\n",
        "every rank trains a tokenizer and writes the token cache at once, instead of reading rank 0's",
    ),
    D(
        "dist-broadcast-skipped",
        _STRATEGY,
        "        dist.broadcast_object_list(box, src=0)\n",
        "",
        "broadcast returns each rank's own value: rank 1 gets no tokenizer (and no temporary directory to save into)",
    ),
    D(
        "dist-file-restart-not-resumed",
        "transformer/cli/file_run.py",
        "        self.resumes = args.resume or self.restarted\n",
        "        self.resumes = args.resume\n",
        "after a torchrun restart, train lm/translate start again from step 0 (and train a new tokenizer)",
    ),
    D(
        "dist-file-sharded-tokenizer-unread",
        "transformer/cli/train_files.py",
        "    ckpt = read_sharded_checkpoint(out) if sharded else load_checkpoint(out, load_trainer_state=False)",
        "    ckpt = load_checkpoint(out, load_trainer_state=False)",
        "--resume of an FSDP language model looks for its tokenizer in a single-file checkpoint that is not there",
    ),
    D(
        "dist-file-sample-on-every-rank",
        "transformer/cli/train_files.py",
        "    sample = _sample_text(model, data) if run.strategy.is_main else None\n",
        "    sample = _sample_text(model, data)\n",
        "every rank samples from 'the gathered model', which under FSDP only rank 0 has",
    ),
    D(
        "dist-file-decodes-the-sharded-model",
        "transformer/cli/train_files.py",
        "            model, trainer, eval_loss, data, train_seconds, examples=args.eval_examples, beam_size=args.beam_size or 1\n",
        (
            "            trainer.model,\n"
            "            trainer,\n"
            "            eval_loss,\n"
            "            data,\n"
            "            train_seconds,\n"
            "            examples=args.eval_examples,\n"
            "            beam_size=args.beam_size or 1,\n"
        ),
        "rank 0 decodes the held-out sources with its FSDP shard of the model while the others are saving",
    ),
    D(
        "dist-generate-reads-a-sharded-checkpoint",
        "transformer/cli/runtime.py",
        "    refuse_sharded(args.checkpoint)\n",
        "",
        "generate (and decode: they share the check) on a sharded checkpoint fails on a missing weights file instead "
        "of saying to consolidate it",
    ),
]

MUTANTS += [
    # --- issue 20: per-rank randomness, the restart's rule for finding a checkpoint
    D(
        "dist-same-dropout-on-every-rank",
        _STRATEGY,
        "        if self.world_size > 1:\n",
        "        if False:\n",
        "every rank keeps the same torch seed after wrapping: the ranks drop the same units of their examples",
    ),
    D(
        "dist-restart-ignores-the-copy-aside",
        _LAUNCH,
        (
            "    from ..checkpoint import find_checkpoint\n"
            "\n"
            "    return world is not None and world.restart_count > 0 and find_checkpoint(out) is not None\n"
        ),
        (
            "\n"
            '    return world is not None and world.restart_count > 0 and os.path.isfile(os.path.join(out, "meta.json"))\n'
        ),
        "a torchrun restart looks only for OUT/meta.json: after a crash between a save's renames it starts from step 0",
    ),
]
