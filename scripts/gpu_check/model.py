"""Whole-model GPU checks: speed against torch.nn.Transformer, training and decoding on the kernel, the integrations.

    python scripts/gpu_check/model.py --out results.jsonl                                   # on a GPU
    TRITON_INTERPRET=1 python scripts/gpu_check/model.py --dry-run --out r.jsonl            # CPU, tiny, short

Every result is appended to ``--out`` as one JSON line the moment it is measured (a stage cut short by its timeout
keeps what it had), with ``"ok": true/false`` where the row is a check; each part runs in its own try/except, so a
broken part is recorded as ``ok: false`` and the next one still runs. The parts, most important first:

1. ``model_speed``: one training step (forward, nll loss, backward, AdamW; bf16 autocast, dropout 0.1) of the
   encoder-decoder (d_model 512, 8 heads, 6+6 layers, d_ff 2048, vocabulary 8000, batch 32 x 512, one row in four
   padded at 3/4, as benchmarks/backends.py) on attention_backend "triton" with checks on and off, on "auto" with
   checks on, and torch.nn.Transformer of the same size (benchmarks/backends.py's reference). tokens/s counts the
   target positions of a step (batch x target length, padding included). Summary row: ok when ours on the kernel
   with checks on is at least 1.15x torch.nn.Transformer.
2. ``model_train_eager_match`` / ``model_decode_eager_match``: the same weights on "triton" and "eager" (float32,
   TF32 off, dropout 0), 5 AdamW steps each (losses within 1e-4 relative), then greedy decoding (identical tokens).
3. ``hf_llama_*``: a tiny random Llama (GQA) in bf16 with the Hugging Face attention function, with torch's SDPA
   flash path routed to our kernel (sdpa_registry), and with the drop-in swapped in for F.scaled_dot_product_attention:
   logits error against a float64 reference within twice SDPA-bf16's plus a floor, finite gradients, kernel calls.
4. ``compile_dynamic``: torch.compile(dynamic=True) of the drop-in on the kernel over six lengths, forward and
   backward: graphs compiled per length (recompiles) and outputs/gradients against the eager call.

``--dry-run`` runs the same code on the CPU under the Triton interpreter (tiny sizes, float32, no autocast, float64
references); what needs CUDA (meaningful timings, the SDPA registry's dispatch) is recorded as skipped.
"""

import argparse
import contextlib
import copy
import importlib
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
try:
    import transformer as T
except ImportError:  # the repository root on the path instead of an installed package
    sys.path.insert(0, str(ROOT))
    import transformer as T

# the result rows are checks.py's (one JSON line each, appended to checks.OUT); the script's folder is on sys.path
import checks  # noqa: E402
from checks import failed, record  # noqa: E402

DRY = False
DEVICE = "cuda"


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def free():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def autocast():
    return torch.autocast("cuda", dtype=torch.bfloat16) if DEVICE == "cuda" else contextlib.nullcontext()


@contextlib.contextmanager
def counting(module, name: str, calls: list):
    """Count the calls of ``module.name`` (as the tests' monkeypatching does), restoring it afterwards."""
    real = getattr(module, name)
    setattr(module, name, lambda *a, **kw: calls.append(1) or real(*a, **kw))
    try:
        yield
    finally:
        setattr(module, name, real)


# ---------------------------------------------------------------------------------------------- 1. model speed
def _backends_benchmark():
    spec = importlib.util.spec_from_file_location("backends_benchmark", ROOT / "benchmarks" / "backends.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def part_speed():
    bench = _backends_benchmark()

    if DRY:
        sizes = dict(d_model=32, heads=2, layers=1, d_ff=64, batch=2, length=16, vocab=50)
        warm, rounds, per_round = 1, 1, 1
    else:
        sizes = dict(d_model=512, heads=8, layers=6, d_ff=2048, batch=32, length=512, vocab=8000)
        warm, rounds, per_round = 3, 2, 5
    batch = bench._data(sizes["vocab"], sizes["batch"], sizes["length"]).to(DEVICE)
    torch.manual_seed(0)
    reference = bench.TorchTransformer(sizes["vocab"], sizes["d_model"], sizes["heads"], sizes["layers"], sizes["d_ff"])
    reference = reference.to(DEVICE).train()
    step = bench._step_torch(reference, torch.optim.AdamW(reference.parameters()), batch)
    steps = {"torch.nn.Transformer": (step, True)}
    models = [reference]
    for backend in ("triton", "auto"):
        torch.manual_seed(0)
        shape = dict(N=sizes["layers"], d_model=sizes["d_model"], d_ff=sizes["d_ff"], h=sizes["heads"])
        model = T.make_model(sizes["vocab"], sizes["vocab"], dropout=0.1, attention_backend=backend, **shape)
        model = model.to(DEVICE).train()
        models.append(model)
        step = bench._step_ours(model, torch.optim.AdamW(model.parameters()), batch, dense=False)
        for enabled in (True, False) if backend == "triton" else (True,):
            steps[f"ours {backend}, checks {'on' if enabled else 'off'}"] = (step, enabled)

    def run(name):
        step, enabled = steps[name]
        with T.checks(enabled), autocast():
            step()

    tokens = sizes["batch"] * sizes["length"]  # target positions per step (padding included)
    times, peaks, extra, warm_up_s = {name: [] for name in steps}, dict.fromkeys(steps, 0), dict.fromkeys(steps, 0), {}
    for name in list(steps):  # warm-up: the kernel's autotuning happens here; a variant that fails is left out
        start = time.perf_counter()
        try:
            for _ in range(warm):
                run(name)
            sync()
        except Exception as error:
            failed("model_speed_variant", error, variant=name)
            del steps[name], times[name]
        warm_up_s[name] = round(time.perf_counter() - start, 2)
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if DEVICE == "cuda":
                torch.cuda.reset_peak_memory_stats()
                start_bytes = torch.cuda.memory_allocated()
            for _ in range(per_round):
                sync()
                start = time.perf_counter()
                run(name)
                sync()
                times[name].append(time.perf_counter() - start)
            if DEVICE == "cuda":
                peak = torch.cuda.max_memory_allocated()
                peaks[name] = max(peaks[name], peak)
                extra[name] = max(extra[name], peak - start_bytes)
    rates = {name: tokens / statistics.median(values) for name, values in times.items()}
    torch_rate = rates.get("torch.nn.Transformer")
    for name, values in times.items():
        median = statistics.median(values)
        record(
            "model_speed_variant",
            variant=name,
            ms_per_step=round(1e3 * median, 2),
            tokens_per_s=round(rates[name]),
            speed_vs_torch=round(rates[name] / torch_rate, 3) if torch_rate else None,
            peak_mb=round(peaks[name] / 2**20) if DEVICE == "cuda" else None,
            peak_over_start_mb=round(extra[name] / 2**20) if DEVICE == "cuda" else None,
            warm_up_s=warm_up_s[name],
            steps_ms=[round(1e3 * v, 2) for v in values],
        )
    ratios = {
        f"ratio_{key}": round(rates[name] / torch_rate, 3) if torch_rate and name in rates else None
        for key, name in (
            ("checks_on", "ours triton, checks on"),
            ("checks_off", "ours triton, checks off"),
            ("auto_checks_on", "ours auto, checks on"),
        )
    }
    common = dict(
        target=1.15,
        **ratios,
        tokens_counted="target positions (batch x target length, padding included)",
        tokens_per_step=tokens,
        non_pad_target_tokens_per_step=batch.ntokens,
        sizes=sizes,
        timed_steps_per_variant=rounds * per_round,
        warm_up_steps=warm,
        precision="bf16 autocast" if DEVICE == "cuda" else "float32",
    )
    if DRY:
        record("model_speed", skipped="timings need CUDA", **common)
    else:
        record("model_speed", ok=(ratios["ratio_checks_on"] or 0.0) >= 1.15, **common)
    steps.clear(), models.clear()
    del reference, model, step
    free()


# ----------------------------------------------------------------------------- 2. training and decoding vs eager
def part_train_decode():
    decoding = importlib.import_module("transformer.decoding")
    if DRY:
        settings, vocab, max_len = dict(N=1, d_model=32, d_ff=64, h=2), 50, 6
        n, src_len, tgt_len = 3, 12, 10
    else:
        settings, vocab, max_len = dict(N=2, d_model=256, d_ff=1024, h=4), 1000, 16
        n, src_len, tgt_len = 8, 128, 128
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(0)
        eager = T.make_model(vocab, vocab, attention_backend="eager", dropout=0.0, **settings).to(DEVICE)
        fused = copy.deepcopy(eager)
        for module in fused.modules():
            if isinstance(module, T.MultiHeadedAttention):
                module.backend = "triton"
        g = torch.Generator().manual_seed(1)
        src = torch.randint(1, vocab, (n, src_len), generator=g)
        tgt = torch.randint(1, vocab, (n, tgt_len + 1), generator=g)
        src[0, src_len * 3 // 4 :], src[1, src_len // 2 :] = 0, 0  # padding at the end of two source rows
        tgt[0, tgt_len * 3 // 4 :] = 0
        batch = T.Batch(src, tgt, pad=0).to(DEVICE)
        losses = {"eager": [], "triton": []}
        calls = []
        kernels = importlib.import_module("transformer.kernels")
        for name, model in (("eager", eager), ("triton", fused)):
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            with counting(kernels, "flash_attention", calls if name == "triton" else []):
                for _ in range(5):
                    log_probs = model.generator(model(*batch.inputs()))
                    loss = F.nll_loss(log_probs.flatten(0, 1), batch.tgt_y.flatten(), ignore_index=0)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    losses[name].append(loss.item())
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses["triton"], losses["eager"], strict=True)]
        pairs = zip(fused.parameters(), eager.parameters(), strict=True)
        param_diff = max((p.detach() - q.detach()).abs().max().item() for p, q in pairs)
        record(
            "model_train_eager_match",
            ok=max(rel) <= 1e-4 and len(calls) > 0 and all(map(lambda x: x == x, losses["triton"])),
            max_rel_loss_diff=max(rel),
            rel_loss_diff_per_step=rel,
            losses_eager=losses["eager"],
            losses_triton=losses["triton"],
            max_param_diff_after=param_diff,
            kernel_calls=len(calls),
            shape=[n, src_len, tgt_len],
            settings=settings,
            tolerance="1e-4 relative per step",
        )
        eager.eval(), fused.eval()
        src_mask = T.padding_mask(batch.src, 0)
        with torch.no_grad():
            ys_e = decoding.greedy_decode(eager, batch.src, src_mask, max_len=max_len, start_symbol=1)
            ys_f = decoding.greedy_decode(fused, batch.src, src_mask, max_len=max_len, start_symbol=1)
        same = ys_e.shape == ys_f.shape and torch.equal(ys_e, ys_f)
        record(
            "model_decode_eager_match",
            ok=same,
            shape=list(ys_f.shape),
            differing_tokens=None if ys_e.shape != ys_f.shape else int((ys_e != ys_f).sum()),
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    del eager, fused
    free()


# ---------------------------------------------------------------------------------- 3. Hugging Face tiny Llama
def part_huggingface():
    import transformers

    from transformer.integrations import huggingface, sdpa_registry

    kernels = importlib.import_module("transformer.kernels")
    low = torch.float32 if DRY else torch.bfloat16
    hidden, length, vocab = (64, 16, 100) if DRY else (256, 64, 1000)
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2 * length,
    )
    torch.manual_seed(0)
    state = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="sdpa").state_dict()

    def build(impl, dtype):
        model = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation=impl)
        model.load_state_dict(state)
        return model.to(DEVICE, dtype).eval()

    ids = torch.randint(3, vocab, (2, length), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    mask = torch.ones(2, length, dtype=torch.long, device=DEVICE)
    mask[1, : length // 4] = 0  # left padding in row 1 (as transformers pads for generation)
    padded = {"input_ids": ids, "attention_mask": mask}
    plain = {"input_ids": ids}  # no mask: SDPA's flash path (what the registry replaces) takes no mask

    def run(model, inputs):
        real = inputs.get("attention_mask", torch.ones_like(inputs["input_ids"]))
        labels = inputs["input_ids"].masked_fill(real == 0, -100)
        out = model(**inputs, labels=labels)
        return out.logits.detach().double(), out.loss

    references = {}
    for key, inputs in (("padded", padded), ("plain", plain)):
        with torch.no_grad():
            exact = run(build("sdpa", torch.float64), inputs)[0]
            sdpa_low = run(build("sdpa", low), inputs)[0]
        real = inputs.get("attention_mask", torch.ones_like(ids)).bool()
        references[key] = (exact, sdpa_low, real)
    free()

    def check(name, model, inputs, key, counter, calls):
        exact, sdpa_low, real = references[key]
        with counter:
            logits, loss = run(model, inputs)
            loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        finite = bool(grads) and all(torch.isfinite(g).all().item() for g in grads) and torch.isfinite(loss).item()
        err = (logits - exact)[real].abs().max().item()
        yardstick = (sdpa_low - exact)[real].abs().max().item()
        floor = 2 * torch.finfo(low).eps * max(1.0, exact[real].abs().max().item())
        vs_sdpa = (logits - sdpa_low)[real].abs().max().item()
        ok = err <= 2 * yardstick + floor and finite and len(calls) > 0
        record(
            name,
            ok=ok,
            dtype=str(low),
            inputs=key,
            err_vs_float64=err,
            sdpa_err_vs_float64=yardstick,
            floor=floor,
            max_abs_diff_vs_sdpa=vs_sdpa,
            grads_finite=finite,
            grads=len(grads),
            kernel_calls=len(calls),
        )

    parts = (("hf_llama_attention_function", "a"), ("hf_llama_sdpa_registry", "b"), ("hf_llama_drop_in", "c"))
    for name, part in parts:
        try:
            calls = []
            if part == "a":
                huggingface.register()
                with T.use_backend("triton"):
                    model = build(huggingface.NAME, low)
                    check(name, model, padded, "padded", counting(kernels, "flash_attention", calls), calls)
            elif part == "b":
                if DEVICE != "cuda":
                    record(name, skipped="the SDPA registry dispatches on CUDA only")
                    continue
                reason = sdpa_registry.missing_reason()
                if reason is not None:
                    record(name, ok=False, error=reason)
                    continue
                from torch.nn.attention import SDPBackend, sdpa_kernel

                sdpa_registry.register()
                model = build("sdpa", low)
                torch.nn.attention.activate_flash_attention_impl(sdpa_registry.NAME)
                try:
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        check(name, model, plain, "plain", counting(sdpa_registry, "_forward", calls), calls)
                finally:
                    torch.nn.attention.restore_flash_attention_impl()
            else:  # the drop-in swapped in for torch's function, as transformers' "sdpa" path calls it
                model = build("sdpa", low)
                with drop_in_for_torchs_sdpa():
                    check(name, model, padded, "padded", counting(kernels, "flash_attention", calls), calls)
        except Exception as error:
            failed(name, error)
        model = None
        free()


@contextlib.contextmanager
def drop_in_for_torchs_sdpa():
    """F.scaled_dot_product_attention replaced by the drop-in on the kernel (a call from inside ours, should our code
    ever call torch's function, gets torch's own: no recursion)."""
    real, inside = F.scaled_dot_product_attention, []

    def drop_in(*args, **kwargs):
        if inside:
            return real(*args, **kwargs)
        inside.append(1)
        try:
            return T.scaled_dot_product_attention(*args, backend="triton", **kwargs)
        finally:
            inside.pop()

    F.scaled_dot_product_attention = drop_in
    try:
        yield
    finally:
        F.scaled_dot_product_attention = real


# ------------------------------------------------------------------------------- 4. torch.compile, dynamic lengths
def part_compile():
    from torch._dynamo.utils import counters

    # not 16 on the CPU: duck sizing would tie a length of 16 to head_dim 16 (a recompile of its own)
    lengths = (20, 28, 40) if DRY else (128, 200, 333, 512, 1000, 1024)
    dtype, heads, dim = (torch.float32, 2, 16) if DRY else (torch.bfloat16, 4, 64)
    backend = "aot_eager" if DRY else "inductor"

    def attend(q, k, v):
        return T.scaled_dot_product_attention(q, k, v, is_causal=True, backend="triton")

    torch._dynamo.reset()
    compiled = torch.compile(attend, dynamic=True, backend=backend)
    graphs, per_length, worst = [], [], 0.0
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for n in lengths:
        g = torch.Generator(device=DEVICE).manual_seed(n)
        q, k, v, grad = (torch.randn(1, heads, n, dim, device=DEVICE, dtype=dtype, generator=g) for _ in range(4))
        before = counters["stats"]["unique_graphs"]
        start = time.perf_counter()
        results = []
        for fn in (compiled, attend):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = fn(*leaves)
            out.backward(grad)
            results.append([out.detach()] + [t.grad for t in leaves])
        sync()
        diff = max(
            (a.double() - b.double()).abs().max().item() / max(1.0, b.abs().max().item())
            for a, b in zip(*results, strict=True)
        )
        worst = max(worst, diff)
        graphs.append(counters["stats"]["unique_graphs"] - before)
        seconds = round(time.perf_counter() - start, 2)
        per_length.append({"length": n, "new_graphs": graphs[-1], "seconds": seconds, "rel_diff": diff})
    reasons = getattr(torch._dynamo.utils, "guard_failures", {})  # code -> the guard failures that recompiled it
    recompiles_every_length = len(lengths) > 1 and all(x > 0 for x in graphs[1:])
    record(
        "compile_dynamic",
        ok=worst <= tolerance and not recompiles_every_length,
        backend=backend,
        dtype=str(dtype),
        lengths=list(lengths),
        graphs_total=sum(graphs),
        recompiles=sum(graphs[1:]),
        per_length=per_length,
        max_rel_diff_vs_eager=worst,
        tolerance=tolerance,
        frames=dict(counters["frames"]),
        recompile_reasons=[str(r)[:300] for rs in reasons.values() for r in rs][-6:],
        note="recompiles for every length" if recompiles_every_length else None,
    )


PARTS = {
    "speed": part_speed,
    "train_decode": part_train_decode,
    "huggingface": part_huggingface,
    "compile": part_compile,
}


def main(argv=None) -> int:
    global DRY, DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="append one JSON line per result here")
    parser.add_argument("--dry-run", action="store_true", help="CPU, interpreter, tiny sizes")
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS), help="which parts (all)")
    args = parser.parse_args(argv)
    checks.OUT, DRY = args.out, args.dry_run
    if DRY:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--dry-run needs TRITON_INTERPRET=1 in the environment (set before Python starts)")
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        parser.error("no CUDA device: pass --dry-run (with TRITON_INTERPRET=1) to run on the CPU")
    began = time.perf_counter()
    record(
        "model_stage_start",
        dry_run=DRY,
        device=torch.cuda.get_device_name() if not DRY else "cpu",
        torch=torch.__version__,
        triton=__import__("triton").__version__,
        parts=args.parts,
    )
    for name in args.parts:
        start = time.perf_counter()
        try:
            PARTS[name]()
        except Exception as error:
            failed(f"part_{name}", error)
        record("part_done", part=name, seconds=round(time.perf_counter() - start, 1))
        free()
    record("model_stage_end", seconds=round(time.perf_counter() - began, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
