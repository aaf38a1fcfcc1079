# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Attention backends: eager, SDPA and our Triton kernel
#
# One attention function, three implementations:
#
# * `eager`: the reference, softmax(QKᵀ/√d_k)V in plain PyTorch (what every other backend is tested against);
# * `torch`: `F.scaled_dot_product_attention`, PyTorch's fused kernels;
# * `triton`: our FlashAttention-2-style kernel (`transformer.kernels`), forward and backward in Triton.
#
# `auto` picks the fastest correct one for the device and the inputs. This notebook switches backends, checks
# that they agree, plots what has been measured on a GPU, and uses the kernel directly in a model of one's own.
# On a CPU the kernel runs through Triton's interpreter (`TRITON_INTERPRET=1`): slow, exact, and enough to see
# it work. Reference: [Attention](../docs/attention.md), [the kernel](../docs/kernels.md).

# %%
import json
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from IPython.display import Image, Markdown, display

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the first kernel launch: run Triton on the CPU

import transformer as tt
from transformer.backends import BACKENDS, resolve_backend, triton_missing_reason

torch.manual_seed(0)
torch.set_num_threads(1)
print("backends:", BACKENDS)
print("CUDA:", torch.cuda.is_available(), "| TRITON_INTERPRET:", os.environ.get("TRITON_INTERPRET"),
      "| triton:", triton_missing_reason() or "installed")

# %% [markdown]
# ## Choosing the backend
#
# From strongest to weakest: the `backend=` argument of one call, the innermost `use_backend` block, the model's
# default (`TransformerConfig.attention_backend`, the "config flag"), and `"auto"`. The backend is a run-time
# choice, not architecture: a checkpoint neither stores nor compares it.

# %%
config = tt.TransformerConfig(src_vocab=11, tgt_vocab=11, n_encoder_layers=2, n_decoder_layers=2, d_model=32,
                             d_ff=64, n_heads=2, dropout=0.0, attention_dropout=0.0, attention_backend="eager")
model = tt.make_model(config).eval()
print("the model's default:", model.encoder.layers[0].self_attn.backend)

src = torch.tensor([[1, 2, 3, 4, 5, 6, 0, 0], [5, 4, 3, 2, 1, 7, 8, 9]])
tgt = torch.tensor([[1, 2, 3, 0, 0], [1, 5, 4, 3, 2]])
src_mask, tgt_mask = tt.AttentionMask.padding(src, 0), tt.AttentionMask.target(tgt, 0)
q = k = v = torch.randn(2, 2, 8, 16)
for requested in ["auto", "eager", "torch", "triton"]:
    print(f"{requested!r:>9} runs these float32 CPU inputs on {resolve_backend(requested, q, k, v, None, 0.0)!r}")
print(f"   'auto' runs float64 inputs on {resolve_backend('auto', q.double(), k.double(), v.double(), None, 0.0)!r}")

# %% [markdown]
# `use_backend` switches a block, whatever the modules' defaults say; `backend=` switches one call:

# %%
with tt.use_backend("torch"):
    print("inside the block:", tt.current_backend())
    out_torch = model(src, tgt, src_mask, tgt_mask)
out_eager = model(src, tgt, src_mask, tgt_mask)  # the model's default, eager
print("outside:", tt.current_backend(), "| max difference torch vs eager:", f"{(out_torch - out_eager).abs().max().item():.1e}")
print(tt.scaled_dot_product_attention(q, k, v, backend="torch").shape)

# %% [markdown]
# A backend asked for by name never falls back silently: if it cannot run the inputs it says why. Here the kernel
# is asked for a head width it does not support (it needs 16 to 256):

# %%
try:
    tt.scaled_dot_product_attention(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), backend="triton")
except ValueError as error:
    print(error)

# %% [markdown]
# ## The backends agree
#
# The same model, the same batch (padded sources, a causal padded target, as `Batch` builds them), run on every
# backend that can run here: outputs and parameter gradients against the eager reference, in float32.

# %%
def run(backend):
    model.zero_grad()
    with tt.use_backend(backend):
        out = model(src, tgt, src_mask, tgt_mask)
    out.square().sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


available = ["eager", "torch"] + (["triton"] if triton_missing_reason() is None else [])
reference_out, reference_grads = run("eager")
rows = []
for backend in available:
    out, grads = run(backend)
    grad_error = max((grads[n] - g).abs().max().item() for n, g in reference_grads.items())
    rows.append(f"| {backend} | {(out - reference_out).abs().max().item():.1e} | {grad_error:.1e} |")
display(Markdown("| backend | max output difference | max gradient difference |\n|---|---|---|\n" + "\n".join(rows)))

# %% [markdown]
# Structured and dense masks are the same function too: `AttentionMask` carries a causal flag and key lengths
# (so the kernel skips the blocks above the diagonal and runs interior blocks without any per-element mask),
# `target_mask` is the dense tensor the Annotated Transformer builds.

# %%
dense = model(src, tgt, tt.padding_mask(src, 0), tt.target_mask(tgt, 0))
for backend in available:
    with tt.use_backend(backend):
        structured = model(src, tgt, src_mask, tgt_mask)
    print(f"{backend:>6}: structured vs dense masks, max difference {(structured - dense).abs().max().item():.1e}")

# %% [markdown]
# ## The kernel on a GPU: what has been measured
#
# `python benchmarks/attention.py` (CUDA only) measures forward and backward TFLOP/s of our kernel beside
# `F.scaled_dot_product_attention`'s flash, cuDNN and efficient backends, and writes
# `benchmarks/results/attention.json`. **It has not run yet: the kernel was written and tested in sessions without
# a GPU, under the Triton interpreter only, so no GPU figures for our kernel exist.** What is committed are the
# reference figures the project measured on its H100 test machine (`benchmarks/results/h100-anchors-2026-11-22.json`):
# the bars our kernel has to reach (forward at least as fast as cuDNN from 4k tokens, backward at least as fast
# as FlashAttention 2).

# %%
results = Path("../benchmarks/results")
anchors = json.loads((results / "h100-anchors-2026-11-22.json").read_text())
meta = anchors["meta"]
print(f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}, batch {meta['batch']}, {meta['date']}")
print("provenance:", meta["provenance"])
print("our kernel:", meta["ours"])
ours = results / "attention.json"
print("benchmarks/results/attention.json:", "present" if ours.exists() else "absent (not measured yet)")

# %%
def tflops(rows, provider, d, n, causal, mode):
    return next((r["tflops"] for r in rows if (r["provider"], r["head_dim"], r["n"], r["causal"], r["mode"]) == (provider, d, n, causal, mode)), None)


lines = ["| D, N, causal | cuDNN fwd | FA2 (sdpa flash) fwd | Triton tutorial fwd (fp16) | cuDNN bwd | FA2 bwd |", "|---|---|---|---|---|---|"]
for d, n, causal in [(64, 1024, False), (64, 4096, True), (128, 4096, False), (128, 16384, True)]:
    cells = [tflops(anchors["rows"], p, d, n, causal, m) for p, m in [("sdpa cudnn", "fwd"), ("sdpa flash", "fwd"),
             ("triton tutorial (fp16)", "fwd"), ("sdpa cudnn", "bwd"), ("sdpa flash", "bwd")]]
    lines.append(f"| {d}, {n // 1024}k, {'yes' if causal else 'no'} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
display(Markdown("TFLOP/s, bf16 (the tutorial kernel fp16), batch 4, FLOPs counted as 4·B·H·N²·D, ×0.5 causal, ×2.5 backward.\n\n" + "\n".join(lines)))

# %% [markdown]
# Plotted with the benchmark's own `plot` function, the one that will draw our kernel's figures beside these
# once a GPU run writes them (one figure per head width). One caution in reading them: the Triton tutorial
# kernel's backward always applies the causal mask, so its non-causal ("full") backward does half the work that
# its FLOP count assumes; those points overstate it.

# %%
import contextlib
import importlib.util
import io

import matplotlib

spec = importlib.util.spec_from_file_location("attention_benchmark", "../benchmarks/attention.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
sources = [anchors] + ([json.loads(ours.read_text())] if ours.exists() else [])
backend = matplotlib.get_backend()
with tempfile.TemporaryDirectory() as tmp:
    for source in sources:
        for head_dim in sorted({r["head_dim"] for r in source["rows"]}):
            path = Path(tmp) / f"attention-d{head_dim}.png"
            with contextlib.redirect_stdout(io.StringIO()):  # plot() prints the path it wrote
                bench.plot([r for r in source["rows"] if r["head_dim"] == head_dim and "tflops" in r], path, source["meta"])
            display(Image(filename=str(path), width=900))
matplotlib.use(backend)  # plot() switched to Agg; give the notebook its inline backend back

# %% [markdown]
# ## Using `transformer.kernels` in your own model
#
# The kernel is a package of its own (it imports torch and triton only): `flash_attention(q, k, v, ...)` takes
# (batch, heads, length, head_dim) tensors and the mask in its structured parts (`causal`, `key_lengths` for
# padding at the end, `key_mask` for padding anywhere, a dense `mask` only for arbitrary patterns), and has a
# backward. `unsupported_reason` says, without raising, whether this machine can run given inputs, so a model can
# fall back to SDPA explicitly. Here a GPT-style causal self-attention block that uses it:

# %%
from transformer.kernels import flash_attention, unsupported_reason


class CausalSelfAttention(torch.nn.Module):
    """Causal multi-head self-attention over padded sequences: our kernel where it runs, SDPA otherwise."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)
        self.used = None

    def forward(self, x, lengths):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # 3 x (b, h, n, d_k)
        reason = unsupported_reason(q, k, v, key_lengths=lengths)
        if reason is None:
            self.used = "transformer.kernels.flash_attention"
            y = flash_attention(q, k, v, causal=True, key_lengths=lengths)
        else:  # say why, never silently
            self.used = f"F.scaled_dot_product_attention ({reason})"
            keep = torch.arange(n) < lengths[:, None]
            mask = torch.ones(n, n, dtype=torch.bool).tril() & keep[:, None, None, :]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


block = CausalSelfAttention(d_model=64, heads=4)
x = torch.randn(2, 24, 64, requires_grad=True)
lengths = torch.tensor([24, 17])  # the second sequence is padded after 17 tokens
y = block(x, lengths)
y[1, :17].sum().backward()
print("ran on:", block.used)
print("output", tuple(y.shape), "| input gradient", tuple(x.grad.shape))

# %% [markdown]
# Against `F.scaled_dot_product_attention` with the equivalent dense mask, on the valid positions (queries past
# a sequence's length see no key at all in the kernel and output zeros; SDPA would give NaN there):

# %%
q, k, v = (torch.randn(2, 4, 24, 16, requires_grad=True) for _ in range(3))
ours = flash_attention(q, k, v, causal=True, key_lengths=lengths)
keep = torch.arange(24) < lengths[:, None]
mask = torch.ones(24, 24, dtype=torch.bool).tril() & keep[:, None, None, :]
reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
valid = keep[:, None, :, None]
print("forward, max difference on valid rows:", f"{(ours - reference).where(valid, 0).abs().max().item():.1e}")
grads = torch.autograd.grad(ours.where(valid, 0).sum(), (q, k, v))
ref_grads = torch.autograd.grad(reference.where(valid, 0).sum(), (q, k, v))
print("backward, max difference:", f"{max((a - b).abs().max().item() for a, b in zip(grads, ref_grads)):.1e}")
