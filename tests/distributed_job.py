"""The tiny distributed job the distributed tests share, its torchrun workers, and launching them.

The tests launch (tests/torchrun_launch.py) ``python -m torch.distributed.run --standalone --nproc_per_node=N`` on this
very file (``WORKER``),
whose ``__main__`` block is the worker: it trains tiny models under DDP and FSDP2 and writes what it saw (losses, the
inputs each rank ran, parameters, checkpoints) into a directory; the tests compare that with one process.

The data is built to reach each law: batches with random target padding, so the ranks hold unequal token counts
(a mean of per-rank means is not the global mean), two micro-batches per step, gradient clipping that bites,
dropout where the resume must restore every rank's own RNG stream, and an odd number of evaluation batches.

The command line's file tasks (``train lm``, ``train translate``) run in one launch too: its worker runs
``python -m transformer train ...`` several times on each rank, recording what each rank trained on and printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import transformer as T
from transformer.training import LabelSmoothing, NoamSchedule, Trainer, TrainerConfig
from transformer.training.batch import Batch

WORKER = Path(__file__).resolve()  # the script torchrun runs: this module
GLOBAL_BATCH, STEPS, ACCUM = 8, 4, 2


# ---------------------------------------------------------------------------- the tiny job (shared with the worker)
def padded_batches(generator: torch.Generator, batch_size: int):
    """Copy-task batches whose rows have random lengths (2..7), padded with 0: token counts differ between rows."""
    while True:
        data = torch.randint(1, 11, (batch_size, 7), generator=generator)
        data[:, 0] = 1
        lengths = torch.randint(2, 8, (batch_size,), generator=generator)
        data = data.masked_fill(torch.arange(7) >= lengths[:, None], 0)
        yield Batch(data.clone(), data.clone(), 0)


def eval_set() -> list[Batch]:
    stream = padded_batches(torch.Generator().manual_seed(77), 6)
    return [next(stream) for _ in range(5)]  # 5 batches: uneven between 2 ranks


def build(*, seed=0, dropout=0.0, steps=STEPS, out_dir=None, checkpoint_every=0, strategy=None) -> Trainer:
    torch.manual_seed(seed)
    config = T.TransformerConfig(
        src_vocab=11,
        tgt_vocab=11,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_model=16,
        d_ff=32,
        n_heads=2,
        dropout=dropout,
        attention_dropout=dropout,
        max_len=16,
    )
    model = T.make_model(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, NoamSchedule(16, 0.5, 4))
    evals = eval_set()
    return Trainer(
        model,
        optimizer,
        lambda g: padded_batches(g, GLOBAL_BATCH),
        criterion=LabelSmoothing(11, 0, 0.1),
        scheduler=scheduler,
        eval_batches=lambda: evals,
        seed=seed,
        strategy=strategy,
        config=TrainerConfig(
            steps=steps, accum_iter=ACCUM, clip_grad=0.5, out_dir=out_dir, checkpoint_every=checkpoint_every
        ),
    )


def write_corpus(path: Path) -> None:
    import random

    words = [
        "the",
        "a",
        "cat",
        "dog",
        "bird",
        "sat",
        "ran",
        "flew",
        "on",
        "under",
        "over",
        "mat",
        "tree",
        "house",
        "red",
        "big",
        "small",
        "old",
        "new",
    ]
    g = random.Random(0)
    path.write_text("\n".join(" ".join(g.choice(words) for _ in range(g.randint(4, 12))) for _ in range(300)) + "\n")


def write_pairs(path: Path, n: int, seed: int) -> None:
    """Translation pairs, number words to digits: ``two six<TAB>2 6``."""
    import random

    digits = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6"}
    g = random.Random(seed)
    rows = [[g.choice(list(digits)) for _ in range(g.randint(1, 4))] for _ in range(n)]
    path.write_text("".join(" ".join(row) + "\t" + " ".join(digits[w] for w in row) + "\n" for row in rows))


TINY_LM = [
    "--d-model",
    "16",
    "--layers",
    "2",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--vocab-size",
    "300",
    "--block-len",
    "16",
    "--max-tokens",
    "64",
    "--warmup",
    "4",
    "--dropout",
    "0.1",
    "--eval-every",
    "2",
    "--no-progress",
]
TINY_TRANSLATE = [
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--tokenizer",
    "char",
    "--max-tokens",
    "128",
    "--max-len",
    "40",
    "--warmup",
    "4",
    "--eval-every",
    "2",
    "--eval-examples",
    "4",
    "--no-progress",
]
RESTARTED = "translate-ddp-restarted"  # run as after a torchrun restart (TORCHELASTIC_RESTART_COUNT=1)
UNSHARABLE = "lm-one-batch"  # an epoch of one batch for two ranks: refused (exit status 2) on every rank


def cli_runs(root: Path) -> dict[str, list[str]]:
    """The file tasks' command lines under torchrun, in the order the worker runs them: each task under DDP and FSDP,
    and each trained half-way then continued, by ``--resume`` (LM, FSDP) or by a torchrun restart (translate, DDP).
    Dropout is on, so a resume must restore every rank's RNG stream. The last one must fail."""
    lm = ["train", "lm", "--text", str(root / "corpus.txt"), *TINY_LM]
    translate = [
        "train",
        "translate",
        "--train",
        str(root / "train.tsv"),
        "--valid",
        str(root / "valid.tsv"),
        *TINY_TRANSLATE,
    ]

    def run(task: list[str], strategy: str, out: str, steps: int, *extra: str) -> list[str]:
        return [*task, "--strategy", strategy, "--steps", str(steps), "--out", str(root / out), *extra]

    return {
        "lm-ddp": run(lm, "ddp", "lm-ddp", 4),
        "lm-fsdp": run(lm, "fsdp", "lm-fsdp", 4),
        "lm-fsdp-half": run(lm, "fsdp", "lm-split", 2),
        "lm-fsdp-resumed": run(lm, "fsdp", "lm-split", 4, "--resume"),
        "translate-ddp": run(translate, "ddp", "tr-ddp", 4),
        "translate-fsdp": run(translate, "fsdp", "tr-fsdp", 4),
        "translate-ddp-half": run(translate, "ddp", "tr-split", 2),
        RESTARTED: run(translate, "ddp", "tr-split", 4),
        UNSHARABLE: run(lm, "ddp", "lm-one-batch", 2, "--max-tokens", "100000"),
    }


def record_inputs(trainer: Trainer) -> list[torch.Tensor]:
    """The source tensors of every training forward (the model's own forward hook: DDP and FSDP call it)."""
    seen: list[torch.Tensor] = []
    trainer.model.register_forward_pre_hook(
        lambda module, args: seen.append(args[0].detach().clone()) if module.training else None
    )
    return seen


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone().contiguous() for name, p in model.named_parameters()}


# ---------------------------------------------------------------------------- the worker (run by torchrun)
def _worker_laws(out: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    import transformer.checkpoint as checkpoint_module
    from transformer.distributed import distributed, setup

    rank = int(os.environ["RANK"])

    def dump(name, value):
        (out / name).write_text(json.dumps(value))

    with distributed("ddp", "cpu") as ddp:
        # A: DDP, 2 ranks x 4 examples, two micro-batches per step
        trainer = build(strategy=ddp)
        seen = record_inputs(trainer)
        calls, counts = [0], []

        def counting(state, bucket):
            calls[0] += 1
            return allreduce_hook(state, bucket)

        trainer.train_model.register_comm_hook(None, counting)
        trainer.model.register_forward_pre_hook(
            lambda module, args: counts.append(calls[0]) if module.training else None
        )
        trainer.train()
        eval_loss = trainer.evaluate()
        save_file(params(trainer.model), out / f"A_rank{rank}.safetensors")
        save_file({str(i): s for i, s in enumerate(seen)}, out / f"A_seen_rank{rank}.safetensors")
        sync_counts = list(counts)
        # contracts on each rank's local tensors, and the switch
        trainer.model.eval()
        src = seen[0][:2]
        bad_src_mask = torch.ones(
            2, 2, src.size(1), dtype=torch.bool
        )  # (batch, 2, src_len): expected (batch, 1, src_len)
        errors = {}
        for on in (True, False):
            with T.checks(on), torch.no_grad():
                try:
                    trainer.train_model(src, src, bad_src_mask, T.target_mask(src, 0))
                    errors[str(on)] = None
                except Exception as error:  # noqa: BLE001 - which kind is the point
                    errors[str(on)] = type(error).__name__
        dump(
            f"A_rank{rank}.json",
            {
                "history": trainer.history.train_loss,
                "eval_loss": eval_loss,
                "tokens": trainer.tokens,
                "sync_counts": sync_counts,
                "final_sync_count": calls[0],
                "errors": errors,
                "checks_enabled": T.checks_enabled(),
            },
        )

        # C: DDP checkpoint and exact resume (dropout on: every rank's RNG stream matters); who writes checkpoints
        writes = []
        real_save = checkpoint_module.save_checkpoint
        checkpoint_module.save_checkpoint = lambda *a, **k: writes.append(rank) or real_save(*a, **k)
        straight = build(seed=1, dropout=0.3, steps=6, out_dir=str(out / "C_ck"), checkpoint_every=3, strategy=ddp)
        with torch.random.fork_rng(devices=[]):  # each rank's dropout stream, without drawing from it
            masks = torch.nn.functional.dropout(torch.ones(64), 0.5)
            save_file(
                {"mask": masks, "seed": torch.tensor(torch.initial_seed())}, out / f"C_dropout_rank{rank}.safetensors"
            )
        straight.train(3)
        straight.config.out_dir = None
        straight.train()
        checkpoint_module.save_checkpoint = real_save
        resumed = build(seed=99, dropout=0.3, steps=6, strategy=ddp)
        resumed.resume(str(out / "C_ck"))
        resumed.train()
        save_file(params(straight.model), out / f"C_straight_rank{rank}.safetensors")
        save_file(params(resumed.model), out / f"C_resumed_rank{rank}.safetensors")
        dump(
            f"C_rank{rank}.json",
            {"straight": straight.history.train_loss, "resumed": resumed.history.train_loss, "writes": len(writes)},
        )

        # H: every rank stops together: a NaN loss on rank 1 alone (divergence), then Ctrl-C on rank 1 alone
        from transformer.training import TrainingDiverged, TrainingInterrupted

        outcome = {}
        diverging = build(seed=2, steps=6, out_dir=str(out / "H_diverged"), checkpoint_every=1, strategy=ddp)
        base, calls = diverging.loss_compute.criterion, [0]

        class NaNOnRank1(torch.nn.Module):
            def forward(self, x, target):
                loss = base(x, target)
                calls[0] += diverging.model.training
                return loss * float("nan") if rank == 1 and calls[0] > 2 * ACCUM else loss

        diverging.loss_compute.criterion = NaNOnRank1()
        try:
            diverging.train()
        except TrainingDiverged as error:
            outcome["diverged_at"] = error.step
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as interactive; a background launch ignores SIGINT
        interrupted = build(seed=2, steps=6, out_dir=str(out / "H_interrupted"), strategy=ddp)
        stream = interrupted.make_batches

        def ctrl_c_on_rank_1(generator):
            for i, batch in enumerate(stream(generator)):
                if rank == 1 and i == 2 * ACCUM:  # while step 3 draws its first micro-batch
                    os.kill(os.getpid(), signal.SIGINT)
                yield batch

        interrupted.make_batches = ctrl_c_on_rank_1
        try:
            interrupted.train()
        except TrainingInterrupted as error:
            outcome["interrupted_at"] = error.step
        dump(f"H_rank{rank}.json", outcome)

        fsdp = setup("fsdp", "cpu")  # the same process group
        # F: each rank seeded differently: FSDP must still start every rank from rank 0's weights
        initial = fsdp.full_model(build(seed=rank, strategy=fsdp).model)
        if rank == 0:
            save_file(params(initial), out / "F_initial.safetensors")
        # B: FSDP2, the same job as A; a sharded checkpoint at step 2
        trainer = build(strategy=fsdp, out_dir=str(out / "B_ck"), checkpoint_every=2)
        seen = record_inputs(trainer)
        trainer.train(2)
        trainer.config.out_dir = None
        trainer.train()
        eval_loss = trainer.evaluate()
        full = fsdp.full_model(trainer.model)
        save_file({str(i): s for i, s in enumerate(seen)}, out / f"B_seen_rank{rank}.safetensors")
        if rank == 0:
            save_file(params(full), out / "B_full.safetensors")
            dump("B.json", {"history": trainer.history.train_loss, "eval_loss": eval_loss, "tokens": trainer.tokens})

        # D: FSDP2 sharded checkpoint, exact resume on the same world size, the weights at the checkpoint
        straight = build(seed=1, dropout=0.3, steps=6, out_dir=str(out / "D_ck"), checkpoint_every=3, strategy=fsdp)
        straight.train(3)
        at_checkpoint = fsdp.full_model(straight.model)
        straight.config.out_dir = None
        straight.train()
        final = fsdp.full_model(straight.model)
        resumed = build(seed=99, dropout=0.3, steps=6, strategy=fsdp)
        resumed.resume(str(out / "D_ck"))
        resumed.train()
        resumed_full = fsdp.full_model(resumed.model)
        if rank == 0:
            save_file(params(at_checkpoint), out / "D_step3.safetensors")
            save_file(params(final), out / "D_straight.safetensors")
            save_file(params(resumed_full), out / "D_resumed.safetensors")
            dump("D.json", {"straight": straight.history.train_loss, "resumed": resumed.history.train_loss})

        # G: a language model on a text file; the data layer's token-budget batches take the rank's shard themselves
        from transformer.distributed import Shard
        from transformer.tasks.text_lm import (
            lm_config,
            make_lm_trainer,
            prepare_lm_data,
        )

        if rank == 0:
            write_corpus(out / "corpus.txt")
        with fsdp.main_first():  # rank 0 tokenizes into the cache; rank 1 then reads it
            data = prepare_lm_data([str(out / "corpus.txt")], str(out / "G_data"), kind="bpe", vocab_size=300, block=16)
        config = lm_config(data.tokenizer, block=16, d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0)
        trainer = make_lm_trainer(
            data, config, max_tokens=64, steps=3, warmup=2, seed=0, eval_every=0, out_dir=str(out / "G_ck")
        )
        trainer.distribute(fsdp)
        seen = record_inputs(trainer)
        trainer.train()
        full = fsdp.full_model(trainer.model)
        share = trainer.make_batches.plan(Shard(rank, 2)).epoch(0)[:3]
        expected = [data.train.make_batch(indices).inputs()[0] for indices in share]
        save_file(
            {f"seen{i}": a for i, a in enumerate(seen)}
            | {f"expected{i}": b.contiguous() for i, b in enumerate(expected)},
            out / f"G_rank{rank}.safetensors",
        )
        if rank == 0:
            save_file(params(full), out / "G_full.safetensors")
        dist.barrier()


def _worker_resize(out: Path) -> None:
    """FSDP2 on another world size resumes the 2-rank checkpoint B_ck (step 2) and trains to STEPS."""
    from transformer.distributed import distributed

    with distributed("fsdp", "cpu") as fsdp:
        trainer = build(seed=5, strategy=fsdp)
        trainer.resume(str(out / "B_ck"))
        start = trainer.step
        trainer.train()
        full = fsdp.full_model(trainer.model)
        if fsdp.is_main:
            save_file(params(full), out / "E_full.safetensors")
            (out / "E.json").write_text(
                json.dumps({"start": start, "world_size": fsdp.world_size, "history": trainer.history.train_loss})
            )


def _worker_raise(out: Path) -> None:
    """Rank 1 raises while drawing step 3's batch; checkpoints are written at every step."""
    from transformer.distributed import distributed, recorded_errors

    rank = int(os.environ["RANK"])

    def failing(generator):
        for step, batch in enumerate(padded_batches(generator, GLOBAL_BATCH)):
            if rank == 1 and step == 2 * ACCUM:
                raise RuntimeError("planted failure on rank 1 at step 3")
            yield batch

    with recorded_errors(), distributed("ddp", "cpu") as ddp:
        trainer = build(steps=10, out_dir=str(out / "ck"), checkpoint_every=1)
        trainer.make_batches = failing
        trainer.distribute(ddp)
        trainer.train()


def _worker_cli(out: Path) -> None:
    """``python -m transformer ARGS`` for each of ``cli_runs(out)`` on this rank, as ``torchrun -m transformer ARGS``
    runs it. The first run joins and leaves the process group itself; the worker then holds one (under keys of its
    own) for the others, which the CLI uses without creating or destroying it, so that one launch runs them all.

    For each run and rank it writes what the rank printed (``NAME.rankR.out``, ``NAME.rankR.err``); its exit status
    and how many tokenizers it trained and token stores it wrote (``NAME.rankR.json``); and, from the Trainer's
    ``train``, the inputs of every training forward beside the batches of this rank's share of the token-budget plan,
    from the position the run started at (``NAME.rankR.safetensors``)."""
    import io
    import runpy
    from datetime import timedelta

    import torch.distributed as dist

    import transformer.data.corpora as corpora
    import transformer.tasks.text_lm as text_lm
    import transformer.tasks.translation_files as translation_files
    from transformer.data.token_batches import position_of
    from transformer.distributed import Shard

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    current, work = {}, {}

    def counted(function, what):
        def call(*args, **kwargs):
            work[what] += 1
            return function(*args, **kwargs)

        return call

    corpora.TokenStoreWriter.__init__ = counted(corpora.TokenStoreWriter.__init__, "stores")
    for module in (text_lm, translation_files):
        module.train_tokenizer = counted(module.train_tokenizer, "tokenizers")
    real_train = Trainer.train

    def recording_train(self, *args, **kwargs):
        seen, start = record_inputs(self), position_of(self.data_generator)
        try:
            return real_train(self, *args, **kwargs)
        finally:
            share = self.make_batches(torch.Generator(), shard=Shard(rank, world_size))  # from the plan's start
            expected = [next(share).inputs()[0] for _ in range(start + len(seen))][start:]
            tensors = {f"seen{i}": a for i, a in enumerate(seen)} | {"start": torch.tensor(start)}
            tensors |= {f"expected{i}": b.contiguous() for i, b in enumerate(expected)}
            save_file(tensors, out / f"{current['name']}.rank{rank}.safetensors")

    Trainer.train = recording_train
    for i, (name, argv) in enumerate(cli_runs(out).items()):
        if i == 1:
            store, _, _ = next(dist.rendezvous("env://"))
            dist.init_process_group(
                "gloo",
                store=dist.PrefixStore("tests/cli-runs", store),
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=120),
            )
        current["name"] = name
        work.update(tokenizers=0, stores=0)
        if name == RESTARTED:  # the first attempt died between the two renames of a save: only the copy aside is left
            if rank == 0:
                os.rename(out / "tr-split", out / "tr-split.old-crashed")
            dist.barrier()
        os.environ["TORCHELASTIC_RESTART_COUNT"] = "1" if name == RESTARTED else "0"
        sys.argv = ["transformer", *argv]
        printed, errors, code = io.StringIO(), io.StringIO(), 0
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
                runpy.run_module("transformer", run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code
        (out / f"{name}.rank{rank}.out").write_text(printed.getvalue())
        (out / f"{name}.rank{rank}.err").write_text(errors.getvalue())
        (out / f"{name}.rank{rank}.json").write_text(json.dumps({**work, "code": code}))
        if code != (2 if name == UNSHARABLE else 0):  # stop the job rather than leave a rank waiting in a collective
            raise SystemExit(f"{name} exited with status {code} on rank {rank}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":  # the worker: python -m torch.distributed.run ... tests/distributed_job.py SCENARIO DIR
    scenario, directory = sys.argv[1], Path(sys.argv[2])
    {"laws": _worker_laws, "resize": _worker_resize, "raise": _worker_raise, "cli": _worker_cli}[scenario](directory)
