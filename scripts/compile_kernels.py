"""Compile the attention kernels for a CUDA architecture on a machine without a GPU.

The CPU interpreter checks the kernels' numerics, but not that they compile for a real GPU: Triton's
type checks, layout passes and ptxas only run on that path. Triton's wheel ships ptxas, so ``triton.compile``
can build cubins here; this script does that for every variant a launch can select and reports failures and
the shared memory each needs (an H100 block may use at most 227 KiB). Each variant is compiled exactly as a launch
on contiguous (batch, heads, len, head_dim) tensors specialises it (:func:`specialise`: unit strides become
constants, multiples of 16 and pointers get divisibility hints): without that, the pipeliner cannot vectorise the
copies and allocates fewer buffers, and the shared memory reported is far below what the launch needs (a head_dim
256 forward config reported as fitting needs 256 KiB when launched). A config that does not fit is reported as
``no fit``; the launch never uses one, because kernels/_tuning.py prunes it by its estimate (``shared_bytes``), and
the estimate is checked here to be at least the compiler's figure (``ESTIMATE LOW`` otherwise, and exit status 1).

    python scripts/compile_kernels.py                   # every dtype, head_dim 40/128/256, every autotune
                                                        # config at 128 and 256, masks/causal/dropout all off
                                                        # and all on (213 variants, 30 minutes on 2 cores)
    python scripts/compile_kernels.py --every-flag-set  # instead: all 32 mask/causal/dropout combinations,
                                                        # every dtype, head_dim 40, first autotune config
    python scripts/compile_kernels.py --quick           # 4 kernels x fp16/fp32, all switches on (CI runs it)
    python scripts/compile_kernels.py --arch 80         # another architecture (A100)

Exit status 1 if any variant fails to compile. Compiling is not running: GPU-only tests still need a GPU.
"""

import argparse
import itertools
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)  # the autotuned kernels are only built without the interpreter

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

try:
    from transformer.kernels import _backward, _forward, _head_dim, _tuning  # noqa: E402
except ImportError:  # a bare environment (e.g. another Triton version's): the kernels need only torch and triton
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from kernels import _backward, _forward, _head_dim, _tuning  # noqa: E402

FLAGS = ("HAS_MASK", "HAS_KMASK", "HAS_KLEN", "CAUSAL", "DROPOUT")
STRUCTURE_FLAGS = ("HAS_DOCS", "HAS_WINDOW", "HAS_SOFTCAP", "HAS_ALIBI")  # issue 29: all four off, or all on
SMEM_LIMIT = _tuning.SMEM_LIMIT  # 227 KiB: what one H100 (sm_90) block may use


# name: (kernel, autotune configs, constexprs that select the kernel's variant)
KERNELS = {
    "forward": (_forward.fwd_kernel, _tuning.FWD_CONFIGS, {"SPLIT": False, "TMA": True}),  # eager launches on sm_90
    "forward, pointers": (_forward.fwd_kernel, _tuning.FWD_CONFIGS, {"SPLIT": False, "TMA": False}),  # torch.compile
    "forward split-KV": (_forward.fwd_split_kernel, _tuning.SPLIT_CONFIGS, {"SPLIT": True, "TMA": False}),
    "dk/dv": (_backward.dkdv_kernel, _tuning.DKDV_CONFIGS, {}),
    "dq": (_backward.dq_kernel, _tuning.DQ_CONFIGS, {}),
}
TUNING_NAMES = {  # _tuning's names
    "forward": "forward",
    "forward, pointers": "forward",
    "forward split-KV": "split",
    "dk/dv": "dkdv",
    "dq": "dq",
}
ITEMSIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
LENGTH = 4096


def launch_integers(heads: int, q_len: int, k_len: int, head_dim: int, splits: int = 1) -> dict:
    """The integer arguments a launch on contiguous (batch, heads, len, head_dim) tensors passes, no masks; with
    ``splits`` > 1, the split-KV forward's (its output: the (batch, heads, splits, q_len, head_dim) workspace)."""
    values = dict(
        heads=heads,
        group=1,
        q_len=q_len,
        k_len=k_len,
        s_mb=0,
        s_mh=0,
        s_mm=0,
        s_mn=0,
        s_kmb=0,
        s_kmn=0,
        s_klb=0,
        Q_BUCKET=q_len,
        K_BUCKET=k_len,
        BH_BUCKET=64,
        n_splits=splits,
        group_splits=1,
        split_keys=k_len // splits,
        s_os=q_len * head_dim if splits > 1 else 0,
    )
    for prefix in ("q", "k", "v", "o", "d", "dq", "dk", "dv"):
        seq, length = ("n", k_len) if prefix in ("k", "v", "dk", "dv") else ("m", q_len)
        values.update(
            {
                f"s_{prefix}b": heads * length * head_dim,
                f"s_{prefix}h": length * head_dim,
                f"s_{prefix}{seq}": head_dim,
                f"s_{prefix}d": 1,
            }
        )
    if splits > 1:
        values.update(s_ob=heads * splits * q_len * head_dim, s_oh=splits * q_len * head_dim)
    return values


def benchmark_integers(head_dim: int, split: bool) -> dict:
    """The benchmark's shapes: 2048 // head_dim heads, length 4096; the split-KV forward as one decoding step
    over that length (one query, 4 splits)."""
    heads = max(2048 // head_dim, 1)
    if split:
        return launch_integers(heads, 1, LENGTH, head_dim, splits=4)
    return launch_integers(heads, LENGTH, LENGTH, head_dim)


def specialise(fn, sig: dict, constexprs: dict, integers: dict):
    """Triton's launch-time specialisation: integers equal to 1 become constants, multiples of 16 and pointers
    get a divisibility-by-16 hint (triton.runtime.jit does the same from the argument values)."""
    sig, constexprs, attrs = dict(sig), dict(constexprs), {}
    for index, name in enumerate(fn.arg_names):
        if sig[name] == "constexpr":
            continue
        if sig[name].startswith("*"):
            attrs[(index,)] = [["tt.divisibility", 16]]
        elif integers.get(name) == 1:
            sig[name], constexprs[name] = "constexpr", 1
        elif name in integers and integers[name] % 16 == 0:
            attrs[(index,)] = [["tt.divisibility", 16]]
    return sig, constexprs, attrs


def jit_function(kernel):
    """The @triton.jit function inside an autotuned kernel (or the kernel itself)."""
    return kernel.fn if isinstance(kernel, Autotuner) else kernel


def signature(fn, dtype: str, constexprs: dict) -> dict:
    """Triton signature of a kernel from its argument names (the naming convention of kernels/)."""
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("MASK", "KMASK"):
            sig[name] = "*u8"
        elif name in ("KLEN", "SEED"):
            sig[name] = "*i64"
        elif name == "DOCB":
            sig[name] = "*i32"  # the documents' per-position bounds (kernels/_args.py document_bounds)
        elif name == "SLOPES":
            sig[name] = "*fp32"
        elif name in ("LSE", "DELTA", "OW", "LW") or (name == "O" and constexprs.get("SPLIT")):
            sig[name] = "*fp32"  # statistics, and the split-KV forward's partial outputs
        elif name[0].isupper():
            sig[name] = "*" + dtype
        elif name in ("sm_scale", "dropout_p", "softcap"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def variants(every_flag_set: bool = False, quick: bool = False):
    """(kernel name, jit fn, dtype, head_dim, flags, triton.Config) to compile."""
    dtypes = ("fp16", "bf16", "fp32")
    flag_sets = list(itertools.product((False, True), repeat=len(FLAGS) + 1))  # the last: STRUCTURE_FLAGS
    for name, (kernel, configs, variant) in KERNELS.items():
        fn = jit_function(kernel)
        for dtype, head_dim, flags in itertools.product(dtypes, (40, 128, 256), flag_sets):
            switches = dict(zip(FLAGS, flags, strict=False), **dict.fromkeys(STRUCTURE_FLAGS, flags[-1]), **variant)
            if quick:
                if dtype != "bf16" and head_dim == 40 and all(flags):
                    yield name, fn, dtype, head_dim, switches, configs[0]
            elif every_flag_set:
                if head_dim == 40:
                    yield name, fn, dtype, head_dim, switches, configs[0]
            elif flags.count(True) in (0, len(flags)):
                for config in configs if head_dim >= 128 else configs[:1]:
                    yield name, fn, dtype, head_dim, switches, config


def head_dim_tile(head_dim: int, split: bool = False) -> dict:
    """BLOCK_D and BLOCK_D2 of a launch: the padded power-of-two tile, or (``split``) its two power-of-two pieces
    where kernels/_head_dim.py ``pieces`` has them (head_dim 80: 64 + 16)."""
    pieces = _head_dim.pieces(head_dim) if split else None
    first, second = pieces or (max(16, triton.next_power_of_2(head_dim)), 0)
    return {"BLOCK_D": first, "BLOCK_D2": second}


def compile_variant(fn, dtype: str, head_dim: int, flags: dict, config, target, integers=None, split: bool = False):
    """``triton.compile`` one kernel variant (dtype, head_dim, the mask/causal/dropout switches, an autotune
    config, the head-dim tile padded or ``split`` in pieces) as a launch with these integer arguments would
    specialise it (default: the benchmark's shapes). The STRUCTURE_FLAGS not in ``flags`` are off."""
    constexprs = dict(
        dict.fromkeys(STRUCTURE_FLAGS, False),
        **flags,
        HEAD_DIM=head_dim,
        PRECISION="ieee" if dtype == "fp32" else "tf32",
        **head_dim_tile(head_dim, split),
        **config.kwargs,
    )
    if integers is None:
        integers = benchmark_integers(head_dim, bool(flags.get("SPLIT")))
    sig, constexprs, attrs = specialise(fn, signature(fn, dtype, constexprs), constexprs, integers)
    source = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(
        source, target=target, options={"num_warps": config.num_warps, "num_stages": config.num_stages}
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--every-flag-set",
        action="store_true",
        help="instead of the default set: all 32 "
        "combinations of the mask, causal and dropout switches (head_dim 40, first config)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke test: fp16 and fp32, head_dim 40, every switch on, first config (seconds)",
    )
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability times ten (default 90)")
    args = parser.parse_args(argv)
    target = GPUTarget("cuda", args.arch, 32)
    print(f"triton {triton.__version__}, target sm_{args.arch}", flush=True)
    failures, count, start, fits, low = 0, 0, time.perf_counter(), {}, 0
    for name, fn, dtype, head_dim, flags, config in variants(args.every_flag_set, args.quick):
        count += 1
        try:
            compiled = compile_variant(fn, dtype, head_dim, flags, config, target)
        except Exception as error:  # report every failure, then fail at the end
            failures += 1
            on = [f for f, v in flags.items() if v]
            print(
                f"FAIL {name} {dtype} head_dim={head_dim} {config} flags={on}: {type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}"
            )
            continue
        key = (name, dtype, head_dim, str(config))
        block_d = max(16, triton.next_power_of_2(head_dim))
        estimate = _tuning.shared_bytes(
            TUNING_NAMES[name], config, block_d, ITEMSIZE[dtype], flags["DROPOUT"], flags["HAS_MASK"]
        )
        if estimate < compiled.metadata.shared:
            low += 1
            print(
                f"ESTIMATE LOW {name} {dtype} head_dim={head_dim} {config}: kernels/_tuning.py estimates "
                f"{estimate} bytes of shared memory, the compiler needs {compiled.metadata.shared}"
            )
        fits[key] = fits.get(key, True) and compiled.metadata.shared <= SMEM_LIMIT
    for small in (_backward.delta_kernel, _forward.combine_kernel):  # one fixed block shape each
        for dtype in ("fp16", "bf16", "fp32"):
            constexprs = dict(
                HEAD_DIM=80, BLOCK_M=32 if small is _backward.delta_kernel else _forward.COMBINE_BLOCK_M, BLOCK_D=128
            )
            triton.compile(
                triton.compiler.ASTSource(
                    fn=small, signature=signature(small, dtype, constexprs), constexprs=constexprs
                ),
                target=target,
            )
            count += 1
    print(f"compiled {count - failures}/{count} variants in {time.perf_counter() - start:.0f} s")
    print("autotune configs within an H100's 227 KiB of shared memory (launches prune the others):")
    summary = {}
    for (name, dtype, head_dim, _), ok in fits.items():
        fit, total = summary.get((name, dtype, head_dim), (0, 0))
        summary[(name, dtype, head_dim)] = (fit + ok, total + 1)
    no_fit = 0
    for (name, dtype, head_dim), (fit, total) in sorted(summary.items()):
        no_fit += fit == 0
        print(f"  {name:8s} {dtype:5s} head_dim={head_dim:3d}: {fit}/{total}{'  NONE FITS' if fit == 0 else ''}")
    return 1 if failures or no_fit or low else 0


if __name__ == "__main__":
    sys.exit(main())
