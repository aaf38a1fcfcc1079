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
# # A pretrained model, checked
#
# A Hugging Face checkpoint folder (`config.json`, `model.safetensors`, `tokenizer.json`) of a GPT-2, Llama, Qwen,
# Mistral or another supported model (the table in [Pretrained checkpoints](../docs/pretrained.md#supported-architectures))
# loads into the package's own `TransformerLM`, which computes what transformers computes,
# with every tensor contract still checked. In this tutorial we load such a folder, generate from it, plant a shape
# bug in an adapter of our own and read the error that names the dimension, run its attention on another backend,
# and fine-tune it for a few steps on a text.
# Reference: [Pretrained checkpoints](../docs/pretrained.md), [The blocks](../docs/lm_blocks.md),
# [generate --model, train lm --init](../docs/data.md#a-pretrained-model-generate-model-train-lm-init).
#
# **Your own model.** Any supported model you already have in your Hugging Face cache works: set the
# environment variable `PRETRAINED_MODEL` to its snapshot folder before starting the notebook, for instance
#
# ```
# PRETRAINED_MODEL=~/.cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/<hash> jupyter lab
# ```
#
# (`huggingface-cli download Qwen/Qwen3-0.6B` puts one there; nothing here downloads anything). Without it, as in
# CI, the notebook writes a small Llama-shaped model with random weights itself, with transformers' own
# `save_pretrained` when transformers is installed, else with ours: the same format either way. Random weights
# generate word salad; the mechanics, the checks and the figures of the fine-tuning are the same.

# %%
import codecs
import json
import os
import tempfile
import this  # noqa: F401  (prints the Zen of Python once; its text is this.s, in rot13)
from pathlib import Path

import warnings

import torch

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm, imported by transformers
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the first kernel call: run Triton on the CPU

import transformer as tt
from transformer.data import train_tokenizer
from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.generation import generate
from transformer.lm.pretrained import PretrainedTokenizer

torch.manual_seed(0)
torch.set_num_threads(1)
ZEN = codecs.decode(this.s, "rot13")

# %% [markdown]
# ## A checkpoint folder
#
# The folder the notebook writes when `PRETRAINED_MODEL` is not set: a byte-level BPE tokenizer trained on the Zen
# of Python (its `tokenizer.json`, and `generation_config.json` naming `</s>` as the end of a text), and a 2-layer
# Llama: rotary positions, RMSNorm, a SwiGLU feed-forward, grouped-query attention (4 query heads sharing 2
# key/value heads).

# %%
def write_tiny_llama(folder: Path) -> Path:
    tokenizer = train_tokenizer([ZEN * 4], "bpe", vocab_size=400, min_frequency=1)
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        config = transformers.LlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1,
            eos_token_id=2, pad_token_id=0,
        )
        transformers.LlamaForCausalLM(config).save_pretrained(folder)
        written_by = f"transformers {transformers.__version__}"
    except ImportError:  # the same format, written by us
        config = LMConfig(
            vocab=tokenizer.vocab_size, n_layers=2, d_model=64, d_ff=128, n_heads=4, n_kv_heads=2, max_len=256,
            dropout=0.0, attention_dropout=0.0, norm="rms", positional_encoding="rotary", embedding_scale=1.0,
            activation="silu", ffn_gated=True, ffn_hidden_dropout=False, qkv_bias=False, out_bias=False,
            ffn_bias=False, lm_head_bias=False, pad_id=0,
        )
        build_lm(config).save_pretrained(folder)
        written_by = "typed-transformer"
    tokenizer.tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": tokenizer.eos_id}))
    print(f"wrote {folder.name} with {written_by}: {sorted(p.name for p in folder.iterdir())}")
    return folder


workdir = tempfile.TemporaryDirectory()
folder = Path(os.environ.get("PRETRAINED_MODEL") or write_tiny_llama(Path(workdir.name) / "tiny-llama")).expanduser()

# %% [markdown]
# ## Load it
#
# `TransformerLM.from_pretrained` reads `config.json` (the architecture, and each field it maps to an `LMConfig`
# field: an option it does not implement is refused by name), builds the model without memory, checks every tensor
# of the safetensors file against it (name, shape, dtype) before reading any, then reads each tensor once. We ask
# for float32 (a downloaded model is often bfloat16). The tokenizer is the folder's `tokenizer.json`, with the ids
# generation stops at.

# %%
model = TransformerLM.from_pretrained(folder, dtype=torch.float32)
tokenizer = PretrainedTokenizer.from_folder(folder)
config = model.config
print(model.pretrained_origin.architecture, f"{sum(p.numel() for p in model.parameters()):,} parameters")
print({name: getattr(config, name) for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_k", "norm",
                                                  "activation", "ffn_gated", "positional_encoding", "rope_theta")})
print("generation stops at", tokenizer.eos_ids, "| vocabulary", tokenizer.vocab_size)

# %% [markdown]
# ## Generate
#
# `generate` continues a batch of prompts with a key/value cache: greedy here, sampled with `sample=True` and a
# seed. `generation_arguments()` are the end ids of `generation_config.json`, so a continuation ends where
# transformers' `generate` ends it. The command line does the same: `typed-transformer generate --model DIR "..."`.

# %%
def continue_text(model, prompt: str, new_tokens: int = 20) -> str:
    ids = tokenizer.encode(prompt)
    out = generate(model.eval(), torch.tensor([ids]), new_tokens, **tokenizer.generation_arguments())
    return tokenizer.decode(out[0].tolist())


prompt = "Beautiful is better than"
print(repr(continue_text(model, prompt)))

# %% [markdown]
# ## A shape bug in your own adapter
#
# Fine-tuning methods bolt small modules onto a pretrained model. Here is a LoRA-style low-rank stand-in for the
# key projection, `x @ A @ B`, with a bug: `B` is stored transposed, `(rank, in_features)` where
# `(rank, out_features)` belongs. With grouped-query attention the key projection is narrower than the model
# (`n_kv_heads * d_k` = 32 features for `d_model` = 64), so the adapter's keys come out twice too wide. Nothing in
# PyTorch objects: the keys are split into heads and rotated as if they were right. The model's contracts do: the
# attention's signature says keys are `batch kv_heads k_len d_k`, and the error names the dimension that is wrong
# and what it should be.

# %%
class LowRankProjection(torch.nn.Module):
    def __init__(self, base: torch.nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(base.in_features, rank) / base.in_features**0.5)
        self.b = torch.nn.Parameter(torch.zeros(rank, base.in_features))  # the bug: base.out_features

    def forward(self, x):
        return x @ self.a @ self.b


attention = model.layers[0].self_attn
original = attention.k_proj
print("k_proj:", original)
attention.k_proj = LowRankProjection(original)
try:
    model.logits(torch.tensor([tokenizer.encode(prompt)]))
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])
attention.k_proj = original  # the model as it was

# %% [markdown]
# The first line says where (the chain of calls from `TransformerLM.logits` down to the attention), which
# argument (`k`), its shape (`f32[1,2,n,32]`) and what was expected (`self.d_k=16` in the last place). The same
# adapter on a model with one key/value head per query head would be caught the same way; an adapter with the
# right shape but wrong values is not a shape bug, and no contract sees it (the parity tests compare values).

# %% [markdown]
# ## Another attention backend
#
# Attention runs on a backend chosen at run time: `eager` (the reference in plain PyTorch), `torch`
# (`F.scaled_dot_product_attention`), `triton` (the package's fused kernel; on a CPU through Triton's interpreter,
# slow and exact) or `auto`. `tt.use_backend` switches it for a block of code, for a model loaded from a folder as
# for any other; the logits agree to float32 rounding.

# %%
tokens = torch.tensor([tokenizer.encode(ZEN[:200])])
with torch.no_grad(), tt.use_backend("eager"):
    reference = model.logits(tokens)
for backend in ("torch", "triton"):
    with torch.no_grad(), tt.use_backend(backend):
        logits = model.logits(tokens)
    print(f"{backend:6s}: max |logits - eager| = {(logits - reference).abs().max().item():.1e} "
          f"(max |logit| {reference.abs().max().item():.1f})")

# %% [markdown]
# ## Fine-tune a few steps on a text
#
# A short fine-tuning run on the Zen of Python: windows of 64 tokens, AdamW at a small learning rate, the loss
# the mean cross-entropy of the next token. The contracts stay on for the first step and are switched off for the
# rest (`tt.checks(False)`), as the trainer's `checks="first"` does: the shapes do not change from step to step.
# `typed-transformer train lm --init DIR --text FILE...` runs the same kind of continuation from the command line,
# with checkpoints, exact resume and torchrun.

# %%
ids = torch.tensor(tokenizer.encode(ZEN * 3))
windows = ids[: (len(ids) - 1) // 65 * 65].view(-1, 65)
print(f"{len(ids)} tokens, {windows.size(0)} windows of 64 + 1")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
model.train()
losses = []
for step in range(30):
    batch = windows[torch.randint(0, windows.size(0), (4,), generator=torch.Generator().manual_seed(step))]
    with tt.checks(step == 0):
        logits = model.logits(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("loss, every fifth step:", " ".join(f"{x:.2f}" for x in losses[::5]), f"... {losses[-1]:.2f}")
print(repr(continue_text(model, prompt)))

# %% [markdown]
# The loss falls from the model's first guess to a few nats as it learns the text by heart (30 steps on a few
# hundred tokens: memorising, not learning English). `model.save_pretrained(DIR)` writes the result as a Hugging
# Face folder that transformers' own `from_pretrained` reads back to the same logits.

# %%
saved = model.save_pretrained(Path(workdir.name) / "fine-tuned")
again = TransformerLM.from_pretrained(saved).eval()
with torch.no_grad():
    print("reloaded, same logits:", torch.equal(again.logits(tokens), model.eval().logits(tokens)))
