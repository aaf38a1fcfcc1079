"""Which attention backend is fastest here, and what the structured mask saves: one training step each.

    python benchmarks/backends.py [--threads 2] [--json benchmarks/results/backends.json]

Times one training step (forward, backward, AdamW step; checks on, the package's default) of the same model on
each attention backend, with the masks a ``Batch`` builds (``AttentionMask``: key lengths, causal flag) and
with the tutorial's dense boolean masks, beside ``torch.nn.Transformer`` of the same size (pre-norm, same
embeddings and generator). Rounds alternate between the variants; the table shows the median step time and
steps/s relative to torch.nn.Transformer. The default sizes are the attention-interface issue's: d_model 256,
8 heads, 3+3 layers, d_ff 1024, batch 32 x 64, vocabulary 1000; one source row in four is padded. Which backend
``"auto"`` picks on this device is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch
from torch import nn

import transformer as T
from transformer.training.batch import Batch


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings and generator as ours (the speed reference)."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, d_ff: int) -> None:
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, d_model), nn.Embedding(vocab, d_model)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=0.1, batch_first=True, norm_first=True)
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, src, tgt, src_pad, tgt_pad):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device, dtype=torch.bool)
        out = self.core(
            self.src_embed(src),
            self.tgt_embed(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return self.generator(out).log_softmax(-1)


def _data(vocab: int, batch: int, length: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, vocab, (batch, length), generator=g)
    tgt = torch.randint(1, vocab, (batch, length + 1), generator=g)
    src[::4, length * 3 // 4 :] = 0  # padding at the end of one row in four
    tgt[::4, length * 3 // 4 :] = 0
    return Batch(src, tgt, pad=0)


def _step_ours(model, optimizer, batch: Batch, dense: bool):
    src_mask, tgt_mask = batch.src_mask, batch.tgt_mask
    if dense:
        src_mask, tgt_mask = T.padding_mask(batch.src, 0), T.target_mask(batch.tgt, 0)

    def step():
        out = model.generator(model(batch.src, batch.tgt, src_mask, tgt_mask))
        loss = nn.functional.nll_loss(out.flatten(0, 1), batch.tgt_y.flatten(), ignore_index=0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _step_torch(model, optimizer, batch: Batch):
    src_pad, tgt_pad = batch.src == 0, batch.tgt == 0

    def step():
        out = model(batch.src, batch.tgt, src_pad, tgt_pad)
        loss = nn.functional.nll_loss(out.flatten(0, 1), batch.tgt_y.flatten(), ignore_index=0)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--backends", nargs="+", default=["eager", "torch"])
    p.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "backends.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batch = _data(args.vocab, args.batch, args.length)
    variants = {}
    torch.manual_seed(0)
    reference = TorchTransformer(args.vocab, args.d_model, args.heads, args.layers, args.d_ff).train()
    variants["torch.nn.Transformer"] = _step_torch(reference, torch.optim.AdamW(reference.parameters()), batch)
    for backend in args.backends:
        for dense in (False, True):
            torch.manual_seed(0)
            model = T.make_model(
                args.vocab,
                args.vocab,
                N=args.layers,
                d_model=args.d_model,
                d_ff=args.d_ff,
                h=args.heads,
                dropout=0.1,
                attention_backend=backend,
            ).train()
            name = f"{backend}, {'dense masks' if dense else 'AttentionMask'}"
            variants[name] = _step_ours(model, torch.optim.AdamW(model.parameters()), batch, dense)
    q = torch.randn(args.batch, args.heads, args.length, args.d_model // args.heads)
    auto = T.backends.resolve_backend("auto", q, q, q, batch.tgt_mask, 0.1)
    load = os.getloadavg()[0]
    print(
        f"one training step, d_model {args.d_model}, {args.heads} heads, {args.layers}+{args.layers} layers, d_ff "
        f"{args.d_ff}, batch {args.batch} x {args.length}, checks on, {args.threads} thread(s), torch "
        f"{torch.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, load {load:.2f}; auto picks {auto!r}"
    )
    for step in variants.values():  # warm-up
        step()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, step in variants.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["torch.nn.Transformer"])
    rows = []
    print(f"{'variant':32s} | {'median step':>11s} | {'steps/s vs torch.nn.Transformer':>31s}")
    for name, values in times.items():
        median = statistics.median(values)
        rows.append(
            {
                "variant": name,
                "median_step_ms": round(1000 * median, 1),
                "relative_steps_per_s": round(base / median, 3),
                "steps_ms": [round(1000 * v, 1) for v in values],
            }
        )
        print(f"{name:32s} | {1000 * median:9.1f} ms | {base / median:30.2f}x")
    result = {
        "benchmark": "one training step per attention backend and mask form",
        "setup": vars(args),
        "auto_picks": auto,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": round(load, 2),
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
