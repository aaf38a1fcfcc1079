"""Host cost of one fused-attention call: the Python work around the kernels, with the kernel launches stubbed.

For short sequences a GPU finishes the kernels in microseconds, so what the host does per call (validation, the
dropout seed, the torch.library op dispatch, the launcher's argument lists) decides the speed. This measures that
work on the CPU: every kernel object's ``run`` is replaced by a no-op, so each call goes through everything up to
the point where Triton would bind the arguments and launch (Triton's own launch cost needs a driver and is not
included). The last rows wrap the kernels in Triton autotuners over their real configs (timings faked), so they
include what CUDA's launch path pays on the host for the autotuner at a tuned key; the floor row is an autograd.Function
that does nothing (what torch's autograd costs with these inputs).

    python benchmarks/kernel_host_cost.py                          # print a table
    python benchmarks/kernel_host_cost.py --json benchmarks/results/kernel_host_cost.json --label after

Timings: the best of ``--repeats`` runs of ``--number`` calls each (the intrinsic cost; the median is printed too),
CPU time of the calling thread in microseconds per call, on CPU tensors (the interpreted op registration; the CUDA
registration is timed directly as
``triton_op``). The goals (issue 27): at most 20 us for a forward call, 60 us for forward + backward.
"""

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU here; the kernels are stubbed anyway

import torch  # noqa: E402
import triton  # noqa: E402

from transformer import kernels  # noqa: E402
from transformer.kernels import _backward, _forward, _op, _tuning  # noqa: E402

KERNEL_NAMES = {
    _forward: ("fwd_kernel", "fwd_split_kernel", "combine_kernel"),
    _backward: ("delta_kernel", "dkdv_kernel", "dq_kernel"),
}


def stub_launches() -> int:
    """Replace every kernel's launch with a no-op; returns how many kernels were stubbed."""
    count = 0
    for module, names in KERNEL_NAMES.items():
        for name in names:
            kernel = getattr(module, name, None)
            if kernel is not None:
                kernel.run = lambda *args, **kwargs: None
                count += 1
    return count


def per_call_us(fn, number: int, repeats: int) -> tuple[float, float]:
    """(best, median) microseconds per call over ``repeats`` runs of ``number`` calls, in CPU time of this thread
    (``time.thread_time``: time the process spends descheduled on a shared machine does not count)."""
    fn()
    runs = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(number):
            fn()
        runs.append((time.thread_time() - start) / number * 1e6)
    return min(runs), statistics.median(runs)


def cases(batch=2, heads=8, length=128, head_dim=64):
    q, k, v = (torch.randn(batch, heads, length, head_dim) for _ in range(3))
    lengths = torch.full((batch,), length - 5)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)

    def forward_backward():  # torch.autograd.grad: no accumulation into .grad (tensor work, not host work)
        out = kernels.flash_attention(qg, kg, vg, causal=True)
        torch.autograd.grad(out, (qg, kg, vg), grad)

    q1, cache = torch.randn(1, heads, 1, head_dim), torch.randn(1, heads, 4096, head_dim)
    steps = itertools.cycle([cache[:, :, :n] for n in range(3000, 3400)])  # a cache growing by one key a step

    def decoding_step():  # split-KV: the split search runs per call unless cached
        keys = next(steps)
        kernels.flash_attention(q1, keys, keys, validate=False)

    class Nothing(torch.autograd.Function):  # the floor: what any autograd.Function costs here, with no kernel code
        @staticmethod
        def forward(ctx, q, k, v, mask, key_mask, key_lengths, seed, causal, scale, dropout_p):
            out, lse = torch.empty_like(q), q.new_empty(q.shape[:3])
            ctx.save_for_backward(q, k, v, out, lse, mask, key_mask, key_lengths, seed)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            q, k, v, *_ = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), *([None] * 7)

    def floor():
        out = Nothing.apply(qg, kg, vg, None, None, None, None, True, 0.125, 0.0)
        torch.autograd.grad(out, (qg, kg, vg), grad)

    return {
        "forward": lambda: kernels.flash_attention(q, k, v),
        "forward, validate=False (as the attention dispatcher calls it)": lambda: kernels.flash_attention(
            q, k, v, validate=False
        ),
        "forward, inputs requiring grad (a training step's forward)": lambda: kernels.flash_attention(qg, kg, vg),
        "forward, causal + key_lengths + dropout": lambda: kernels.flash_attention(
            q, k, v, causal=True, key_lengths=lengths, dropout_p=0.1
        ),
        "unsupported_reason (the dispatcher's check)": lambda: kernels.unsupported_reason(q, k, v),
        "triton_op (the CUDA registration) called directly": lambda: _op.flash_attn_fwd(
            q, k, v, None, None, None, None, False, 0.125, 0.0
        ),
        "forward + backward (autograd)": forward_backward,
        "decoding step: q_len 1, k_len 3000..3399 (split-KV), validate=False": decoding_step,
        "floor: an autograd.Function doing nothing (same inputs), forward + torch.autograd.grad": floor,
    }


def autotuned_cases(batch=2, heads=8, length=128, head_dim=64):
    """Rows for CUDA's launch path, run last: the forward and backward kernels become Triton autotuners over their
    real configs (built as off the interpreter; 'timings' faked, every launch still stubbed), so each call pays what a
    CUDA call pays on the host for the autotuner at a tuned key (Triton's ``Autotuner.run`` rebuilds its key from
    the ~50 arguments at every call) or, with kernels/_args.py's ``launch``, what is left of it."""
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        tuners = {
            (_forward, "fwd_kernel"): _tuning.build(_forward._fwd_kernel, "forward"),
            (_backward, "dkdv_kernel"): _tuning.build(_backward._dkdv_kernel, "dkdv"),
            (_backward, "dq_kernel"): _tuning.build(_backward._dq_kernel, "dq"),
        }
    finally:
        os.environ["TRITON_INTERPRET"] = "1"
    for (module, name), tuner in tuners.items():
        tuner._bench = lambda *args, config, **meta: [1.0, 1.0, 1.0]
        tuner.cache_results = False  # nothing to Triton's cache directory
        setattr(module, name, tuner)
        module.INTERPRETED = False  # (this change) the launchers pass no interpreter blocks to an autotuner
    _tuning.block_kwargs = dict  # (before this change) the same
    q, k, v = (torch.randn(batch, heads, length, head_dim) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)

    def forward_backward():
        out = kernels.flash_attention(qg, kg, vg, causal=True)
        torch.autograd.grad(out, (qg, kg, vg), grad)

    return {
        "autotuned kernels (CUDA's launch path, tuned key): forward": lambda: kernels.flash_attention(q, k, v),
        "autotuned kernels (CUDA's launch path, tuned key): forward + backward": forward_backward,
    }


def all_cases():
    """The rows in order; the autotuned rows last (they replace the kernels for the rest of the process)."""
    yield from cases().items()
    yield from autotuned_cases().items()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", help="add this run to a JSON file (a list of runs, by label)")
    parser.add_argument("--label", default="current", help="name of this run in the JSON file")
    args = parser.parse_args(argv)
    stubbed = stub_launches()
    torch.set_num_threads(1)
    print(
        f"{stubbed} kernels stubbed; torch {torch.__version__}, triton {triton.__version__}, "
        f"python {platform.python_version()}; microseconds per call, best / median of {args.repeats}"
    )
    rows = []
    for name, fn in all_cases():
        number = max(20, args.number // 5) if "backward" in name else args.number
        best, median = per_call_us(fn, number, args.repeats)
        rows.append({"case": name, "best_us": round(best, 1), "median_us": round(median, 1)})
        print(f"  {best:8.1f} {median:8.1f}  {name}", flush=True)
    if args.json:
        runs = json.load(open(args.json)) if os.path.exists(args.json) else []
        runs = [run for run in runs if run["label"] != args.label]
        load = os.getloadavg()
        runs.append(
            {
                "label": args.label,
                "date": time.strftime("%Y-%m-%d"),
                "torch": torch.__version__,
                "triton": triton.__version__,
                "python": platform.python_version(),
                "cpu": platform.processor() or platform.machine(),
                "load_average_1_5_15": [round(x, 2) for x in load],
                "shapes": "q, k, v (2, 8, 128, 64) float32 on the CPU, torch.set_num_threads(1)",
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                "rows": rows,
            }
        )
        with open(args.json, "w") as handle:
            json.dump(runs, handle, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
