"""A seeded differential fuzzer: ``transformer.scaled_dot_product_attention`` (the drop-in, on each backend) against
``torch.nn.functional.scaled_dot_product_attention`` as the oracle (docs/integrations.md, "A drop-in for ...").

Each case is drawn from ``random.Random(f"{seed}:{index}")`` over every argument torch takes: ranks 2-5 with leading
dims that broadcast (some 1), empty and size-1 axes, ``enable_gqa``, masks of every kind torch accepts (none, boolean,
float32 or the query's dtype, every broadcastable shape from 0-D to full, ``causal_upper_left`` /
``causal_lower_right`` bias objects), ``is_causal`` with and without a mask, ``scale`` (None, positive, negative),
dtypes float32/float64/float16/bfloat16, non-contiguous inputs, and invalid inputs (mismatched dtypes, masks that do
not broadcast, integer masks, keys of another width, values of another length, GQA heads that do not divide, dropout
outside [0, 1], 1-D inputs). The oracle is torch's function under its math backend (the one the drop-in follows where
torch's own backends disagree); values may instead match torch's default dispatch (its fused CPU path rounds otherwise
in half precision). Compared: the outputs, the gradients of query, key and value (float32/float64 and
the half types), and for inputs torch refuses, the exception type. The ``"triton"`` backend (under TRITON_INTERPRET=1
on a CPU) gets only the kernel's domain (4-D, float32/float16, head dims 16/32, no float mask, lengths >= 1).
Dropout is checked by its statistics on each backend (:func:`dropout_statistics`).

Short budget: ``tests/test_sdpa_differential.py``. Long budget, by hand::

    TRITON_INTERPRET=1 python benchmarks/sdpa_differential.py --cases 4000 --triton-cases 300 \
        --json benchmarks/results/differential/sdpa.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import warnings
from collections import Counter

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402 (TRITON_INTERPRET first)
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.attention.bias import causal_lower_right, causal_upper_left  # noqa: E402

import transformer as tt  # noqa: E402

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
TOL = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (2e-5, 2e-4),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
#: differences the drop-in keeps on purpose (docs/integrations.md, "Differences from torch's function")
KNOWN_EMPTY = "known: torch short-circuits an empty input (no shape checks, the query's leading dims)"
KNOWN_NEGATIVE_DROPOUT = "known: dropout_p < 0 refused (torch ignores it)"
INVALID = ("dtype", "mask_int", "mask_shape", "key_width", "value_length", "gqa_heads", "dropout_range", "rank1")


def _shape_of_leading(rng: random.Random, n: int) -> list[int]:
    return [rng.choice((1, 2, 3)) for _ in range(n)]


def _thin(rng: random.Random, dims: list[int]) -> list[int]:
    """Some of the dims replaced by 1 (broadcast), some leading ones dropped."""
    dims = [d if rng.random() < 0.7 else 1 for d in dims]
    drop = rng.randrange(len(dims) + 1) if dims and rng.random() < 0.3 else 0
    return dims[drop:]


def _tensor(rng: random.Random, shape, dtype, contiguous: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    shape = list(shape)
    if contiguous or len(shape) < 2:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    swapped = shape[:-2] + [shape[-1], shape[-2]]
    return torch.randn(swapped, generator=g, dtype=torch.float64).to(dtype).transpose(-1, -2)  # a strided view


def draw_case(seed: int, index: int, triton: bool = False) -> dict:
    """One case: the arguments (tensors built) and its labels; reproducible from (seed, index)."""
    rng = random.Random(f"{seed}:{index}:{triton}")
    labels = {}
    if triton:
        dtype = rng.choice((torch.float32, torch.float16))
        rank, lead = 4, [rng.choice((1, 2)), rng.choice((1, 2, 3))]
        e = ev = rng.choice((16, 32))
        q_len, k_len = rng.choice((1, 2, 5, 9)), rng.choice((1, 3, 5, 9))
    else:
        dtype = rng.choice(DTYPES)
        rank = rng.choice((2, 3, 4, 4, 5))
        lead = _shape_of_leading(rng, rank - 2)
        e = rng.choice((1, 4, 8, 16))
        ev = e if rng.random() < 0.7 else rng.choice((1, 3, 8))
        q_len, k_len = rng.choice((0, 1, 2, 3, 5, 8)), rng.choice((0, 1, 2, 3, 5, 8))
    gqa = rank >= 3 and rng.random() < 0.25
    kv_lead = list(lead)
    if gqa:
        kv_heads = rng.choice([d for d in (1, 2, 3) if lead[-1] % d == 0] or [1])
        kv_lead[-1] = kv_heads
        lead[-1] = lead[-1] * rng.choice((1, 2))
    contiguous = triton or rng.random() < 0.7
    q_lead = lead if triton else _thin(rng, lead) if not gqa else lead
    kv_lead = kv_lead if triton or gqa else _thin(rng, kv_lead)
    query = _tensor(rng, [*q_lead, q_len, e], dtype, contiguous)
    key = _tensor(rng, [*kv_lead, k_len, e], dtype, contiguous)
    value = _tensor(rng, [*kv_lead, k_len, ev], dtype, contiguous)
    out_lead = list(torch.broadcast_shapes(tuple(q_lead), tuple(kv_lead))) if not gqa else lead
    weights = [*out_lead, q_len, k_len]
    kinds = ("none", "bool", "float", "upper_left", "lower_right") if not triton else ("none", "bool", "upper_left")
    kinds = (*kinds, "lower_right") if triton else kinds
    mask_kind = rng.choice(kinds)
    mask = None
    if mask_kind in ("bool", "float"):
        n = rng.randrange(len(weights) + 1)
        shape = [d if rng.random() < 0.6 else 1 for d in weights[len(weights) - n :]]
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        if mask_kind == "bool":
            mask = torch.rand(shape, generator=g) < rng.choice((0.5, 0.8, 1.0))
        else:
            mask_dtype = rng.choice((torch.float32, dtype))
            mask = torch.randn(shape, generator=g, dtype=torch.float64).to(mask_dtype)
            if rng.random() < 0.3 and mask.numel():
                mask = mask.masked_fill(torch.rand(shape, generator=g) < 0.4, float("-inf"))
        labels["mask_dims"] = n
    elif mask_kind == "upper_left":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mask = causal_upper_left(q_len, k_len)
    elif mask_kind == "lower_right":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mask = causal_lower_right(q_len, k_len)
    is_causal = rng.random() < (0.08 if mask is not None else 0.3)
    scale = rng.choice((None, None, 0.5, 1.7, -0.8))
    args = {"query": query, "key": key, "value": value, "attn_mask": mask, "dropout_p": 0.0, "is_causal": is_causal}
    args.update(scale=scale, enable_gqa=gqa)
    invalid = None
    if not triton and rng.random() < 0.15:
        invalid = rng.choice(INVALID)
        args = _make_invalid(rng, invalid, args)
    labels.update(dtype=str(dtype).removeprefix("torch."), rank=rank, mask=mask_kind, is_causal=is_causal)
    labels.update(gqa=gqa, contiguous=contiguous, empty=0 in (q_len, k_len), scale=scale, invalid=invalid)
    labels.update(shapes=[list(query.shape), list(key.shape), list(value.shape)])
    return {"args": args, "labels": labels}


def _make_invalid(rng: random.Random, kind: str, args: dict) -> dict:
    args = dict(args)
    q, k, v = args["query"], args["key"], args["value"]
    if kind == "dtype":
        args["key"] = k.to(torch.float64 if k.dtype != torch.float64 else torch.float32)
    elif kind == "mask_int":
        args["attn_mask"], args["is_causal"] = torch.ones(q.size(-2), k.size(-2), dtype=torch.int64), False
    elif kind == "mask_shape":
        args["attn_mask"], args["is_causal"] = torch.ones(q.size(-2) + 1, k.size(-2) + 2, dtype=torch.bool), False
    elif kind == "key_width":
        args["key"] = torch.randn(*k.shape[:-1], k.size(-1) + 1, dtype=k.dtype)
    elif kind == "value_length":
        args["value"] = torch.randn(*v.shape[:-2], v.size(-2) + 1, v.size(-1), dtype=v.dtype)
    elif kind == "gqa_heads" and q.dim() >= 3:
        args["key"] = torch.randn(*k.shape[:-3], q.size(-3) + 1, *k.shape[-2:], dtype=k.dtype)
        args["value"] = torch.randn(*v.shape[:-3], q.size(-3) + 1, *v.shape[-2:], dtype=v.dtype)
        args["enable_gqa"] = True
    elif kind == "dropout_range":
        args["dropout_p"] = rng.choice((-0.1, 1.5))
    elif kind == "rank1":
        args["query"] = q.reshape(-1)[: max(1, q.size(-1))]
    return args


def _call(fn, args: dict, grads: bool, **extra):
    """(output, gradients of query/key/value or None) or the exception raised."""
    leaves = {}
    call = dict(args)
    if grads:
        for name in ("query", "key", "value"):
            leaves[name] = call[name].detach().requires_grad_(True)
            call[name] = leaves[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(**call, **extra)
            if not grads or not out.numel():
                return out.detach(), None
            g = torch.Generator().manual_seed(7)
            grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
            gs = torch.autograd.grad(out, list(leaves.values()), grad_out, allow_unused=True)
            return out.detach(), [None if x is None else x.detach() for x in gs]
    except Exception as error:  # noqa: BLE001 (the exception type is what is compared)
        return error


def oracle(**args):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(**args)


def _close(a: torch.Tensor, b: torch.Tensor, dtype) -> bool:
    atol, rtol = TOL[dtype]
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.allclose(a.double(), b.double(), atol=atol * 10, rtol=rtol * 10, equal_nan=True)


def compare(case: dict, backend: str, grads: bool = True) -> str | None:
    """None when the drop-in on ``backend`` agrees with the oracle on this case, else the class of disagreement."""
    args = case["args"]
    expected = _call(oracle, args, grads)
    got = _call(tt.scaled_dot_product_attention, args, grads, backend=backend)
    tensors = [args[name] for name in ("query", "key", "value") if isinstance(args[name], torch.Tensor)]
    empty = any(t.numel() == 0 for t in tensors)
    if empty and isinstance(got, Exception) != isinstance(expected, Exception):
        return KNOWN_EMPTY
    if empty and not isinstance(got, Exception) and got[0].shape != expected[0].shape:
        return KNOWN_EMPTY
    if isinstance(got, RuntimeError) and not isinstance(expected, Exception) and args["dropout_p"] < 0:
        return KNOWN_NEGATIVE_DROPOUT
    if isinstance(expected, Exception) or isinstance(got, Exception):
        if isinstance(expected, Exception) and isinstance(got, Exception):
            return (
                None
                if type(got) is type(expected)
                else f"error type ({type(got).__name__} for {type(expected).__name__})"
            )
        if isinstance(got, Exception):
            if backend == "triton" and isinstance(got, ValueError) and "cannot run these inputs" in str(got):
                return "triton refusal"
            return f"raises ({type(got).__name__}) where torch does not"
        return f"accepts where torch raises {type(expected).__name__}"
    verdict = _values_differ(got, expected, args["query"].dtype)
    if verdict is not None:  # torch's own fused CPU path rounds otherwise in half precision: either of torch's is right
        default = _call(F.scaled_dot_product_attention, args, grads)
        if not isinstance(default, Exception) and _values_differ(got, default, args["query"].dtype) is None:
            return None
    return verdict


def _values_differ(got, expected, dtype) -> str | None:
    if not _close(got[0], expected[0], dtype):
        return "output"
    if got[1] is not None and expected[1] is not None:
        for name, a, b in zip(("query", "key", "value"), got[1], expected[1], strict=True):
            if (a is None) != (b is None) or (a is not None and not _close(a, b, dtype)):
                return f"gradient of {name}"
    return None


def dropout_statistics(backend: str, p: float = 0.3, rows: int = 4096, keys: int = 16) -> dict:
    """Uniform attention (q = k = 0) over all-ones values: each output row is (kept keys / keys) / (1 - p), so its
    mean is 1 and the kept fraction's mean is 1 - p. Returns the measured means (torch's own too)."""
    q = torch.zeros(1, 1, rows, 16)
    k = torch.zeros(1, 1, keys, 16)
    v = torch.ones(1, 1, keys, 16)
    torch.manual_seed(0)
    if backend == "oracle":
        out = oracle(query=q, key=k, value=v, dropout_p=p)
    else:
        out = tt.scaled_dot_product_attention(q, k, v, dropout_p=p, backend=backend)
    kept = out[..., 0] * keys * (1 - p)
    return {
        "mean_output": float(out.mean()),
        "keep_rate": float(kept.mean() / keys),
        "integral": bool(torch.allclose(kept, kept.round(), atol=1e-3)),
    }


def run(seed: int, cases: int, triton_cases: int, backends=("eager", "torch", "triton")) -> dict:
    counts, classes, examples = Counter(), Counter(), {}
    for backend in backends:
        n = triton_cases if backend == "triton" else cases
        for index in range(n):
            case = draw_case(seed, index, triton=backend == "triton")
            counts[backend] += 1
            verdict = compare(case, backend, grads=case["args"]["query"].dtype != torch.bfloat16 or index % 2 == 0)
            if verdict is not None:
                label = f"{backend}: {verdict}: mask={case['labels']['mask']}"
                classes[label] += 1
                examples.setdefault(label, {"index": index, **case["labels"]})
    stats = {b: dropout_statistics(b) for b in ("oracle", *backends)}
    return {
        "seed": seed,
        "cases": dict(counts),
        "disagreements": sum(n for c, n in classes.items() if ": known: " not in c),
        "known_differences": sum(n for c, n in classes.items() if ": known: " in c),
        "by_class": dict(sorted(classes.items())),
        "first_example_by_class": examples,
        "dropout": stats,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--triton-cases", type=int, default=40)
    parser.add_argument("--backends", default="eager,torch,triton")
    parser.add_argument("--json", default=None)
    parser.add_argument("--label", default="after")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    result = run(opts.seed, opts.cases, opts.triton_cases, tuple(opts.backends.split(",")))
    import triton

    result.update(
        label=opts.label,
        date=datetime.date.today().isoformat(),
        command="python benchmarks/sdpa_differential.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        versions={
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "transformer": getattr(tt, "__version__", "?"),
        },
    )
    if opts.json:
        path = opts.json
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        previous = {}
        if os.path.exists(path):
            with open(path) as f:
                previous = json.load(f)
        previous[opts.label] = result
        with open(path, "w") as f:
            json.dump(previous, f, indent=1, default=str)
            f.write("\n")
    print(json.dumps({k: result[k] for k in ("cases", "disagreements", "known_differences", "by_class")}, indent=1))
    return result


if __name__ == "__main__":
    main()
