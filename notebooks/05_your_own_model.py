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
# # Your own model, checked and fused
#
# The other tutorials use the package's own models. This one is about yours: a model you wrote (or downloaded),
# into which you bring two things from typed-transformer, each on its own:
#
# 1. **contracts**: `transformer.checked` and the annotation types (`Float`, `Int`, `Bool`, `Tensor`), with your
#    own dimension names, checked at every call, in eager mode and under `torch.compile`;
# 2. **the fused attention kernel**, through `transformer.scaled_dot_product_attention`, a drop-in for
#    `torch.nn.functional.scaled_dot_product_attention` (same signature, same answers), and through
#    `attn_implementation="typed_transformer"` for a Hugging Face model.
#
# We write a small GPT-style block from scratch, plant a shape bug and read the error that catches it, compile the
# model and see the contract still hold, swap its attention to our kernel, and switch a Hugging Face model to it.
# Reference: [Use it in your project](../docs/integrations.md), [Contracts](../docs/contracts.md).
#
# On a CPU the kernel runs through Triton's interpreter: `TRITON_INTERPRET=1` must be set before the first kernel
# call (here: before anything is imported). It is slow and exact, enough to see the kernel run and check its answers.

# %%
import copy
import logging
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the first kernel call: run Triton on the CPU

import torch.nn.functional as F
from torch import nn
from torch.nn.functional import scaled_dot_product_attention

import transformer as tt
from transformer import Float, Tensor, checked

torch.manual_seed(0)
torch.set_num_threads(1)
print("CUDA:", torch.cuda.is_available(), "| TRITON_INTERPRET:", os.environ.get("TRITON_INTERPRET"))

# %% [markdown]
# ## A GPT-style block with contracts
#
# A pre-norm block: causal self-attention with grouped-query attention (fewer key/value heads than query heads,
# as in Llama), then a feed-forward network, each around a residual. The dimension names are ours (`batch`, `seq`,
# `embed`, `heads`, `kv_heads`, `head_dim`): the package's vocabulary binds only the package's own annotations.
# `{self.embed}` reads the module's own attribute at call time, so "the input is as wide as this block" is part of
# the signature. `@checked` binds each name the first time it is seen in a call and holds every other occurrence,
# the return value included, to it.
#
# The attention call is `scaled_dot_product_attention`, imported from torch in the cell above: the code as it is
# in many models today.

# %%
class CausalSelfAttention(nn.Module):
    def __init__(self, embed: int, heads: int, kv_heads: int):
        super().__init__()
        self.embed, self.heads, self.kv_heads, self.head_dim = embed, heads, kv_heads, embed // heads
        self.q = nn.Linear(embed, embed)
        self.kv = nn.Linear(embed, 2 * kv_heads * self.head_dim)  # fewer key/value heads: a smaller cache
        self.out = nn.Linear(embed, embed)

    @checked
    def attend(self, q: Float[Tensor, "batch heads seq head_dim"], k: Float[Tensor, "batch kv_heads seq head_dim"],
               v: Float[Tensor, "batch kv_heads seq head_dim"]) -> Float[Tensor, "batch heads seq head_dim"]:
        return scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    @checked
    def forward(self, x: Float[Tensor, "batch seq {self.embed}"]) -> Float[Tensor, "batch seq {self.embed}"]:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return self.out(self.attend(q, k, v).transpose(1, 2).reshape(b, n, self.embed))


class Block(nn.Module):
    def __init__(self, embed: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.embed = embed
        self.norm1, self.norm2 = nn.LayerNorm(embed), nn.LayerNorm(embed)
        self.attn = CausalSelfAttention(embed, heads, kv_heads)
        self.mlp = nn.Sequential(nn.Linear(embed, hidden), nn.GELU(), nn.Linear(hidden, embed))

    @checked
    def forward(self, x: Float[Tensor, "batch seq {self.embed}"]) -> Float[Tensor, "batch seq {self.embed}"]:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 50, embed: int = 64, heads: int = 4, kv_heads: int = 2, layers: int = 2,
                 max_len: int = 16):
        super().__init__()
        self.vocab = vocab
        self.tokens, self.positions = nn.Embedding(vocab, embed), nn.Embedding(max_len, embed)
        self.blocks = nn.ModuleList(Block(embed, heads, kv_heads, 4 * embed) for _ in range(layers))
        self.head = nn.Linear(embed, vocab)

    @checked
    def forward(self, ids: tt.Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq {self.vocab}"]:
        x = self.tokens(ids) + self.positions(torch.arange(ids.size(1)))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = TinyGPT().eval()
ids = torch.randint(0, 50, (2, 9))
print("logits", tuple(model(ids).shape))

# %% [markdown]
# ## A shape bug, caught and read
#
# A classic: splitting the heads and forgetting the transpose, so that the attention gets (batch, seq, heads,
# head_dim) where it expects (batch, heads, seq, head_dim). Plain PyTorch runs it without a word whenever the
# shapes happen to fit: attention then mixes the heads of one position instead of the positions of one head.
# Here is the planted bug, as a subclass:

# %%
class ForgotTranspose(CausalSelfAttention):
    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim)  # no .transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.head_dim).unbind(2)
        return self.out(self.attend(q, k, v).transpose(1, 2).reshape(b, n, self.embed))


buggy = ForgotTranspose(64, 4, 2)
buggy.load_state_dict(model.blocks[0].attn.state_dict())
x = torch.randn(2, 9, 64)
with tt.checks(False):  # the contracts off: what plain PyTorch does
    print("checks off: output", tuple(buggy(x).shape), "and no error (a wrong answer, silently)")
try:
    buggy(x)
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])

# %% [markdown]
# How to read it. The first line says, in order:
#
# * **where**: `CausalSelfAttention.attend`, the checked function (with `A > B` for a chain of checked callers;
#   the subclass's `forward` is not checked, so the chain starts here);
# * **what**: `argument 'k'`, its actual dtype and shape `f32[2,9,2,16]`, and the expected annotation;
# * **the sizes bound so far**: `batch=2, heads=9, seq=4, head_dim=16, kv_heads=9`. `q` came first and bound
#   `heads=9` and `seq=4`: nine heads of four positions, where the model has four heads and nine positions. Then
#   `k` bound `kv_heads=9` and, with its two key/value heads in the `seq` place, cannot agree with `seq=4`. The
#   transpose is missing.
#
# Below the first line comes jaxtyping's full report (the parameters, their annotations, the bound values).
#
# An annotation that reads the module (`{self.embed}`) shows the value it read. Here a caller feeds the block a
# 63-wide input:

# %%
try:
    model.blocks[0](torch.randn(2, 9, 63))
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])

# %% [markdown]
# `(self.embed=64)` is the value of the field at the time of the call, so the message answers "expected how
# wide?" without a look at the code. Checks cost a few microseconds per call and can be switched off for a run
# (`tt.set_checks(False)`, the `tt.checks(False)` block above, or `TYPED_TRANSFORMER_CHECKS=0`); see
# [Contracts](../docs/contracts.md#switching-checks-off).

# %% [markdown]
# ## A bug no signature sees: `check` inside the forward
#
# karpathy/nanoGPT's `CausalSelfAttention` splits q, k and v into heads with `view` and `transpose` inside its
# forward. Swap heads and head_dim in those `view`s (or forget the `transpose`) and every shape at the module's
# boundary is still right, (batch, seq, n_embd) in and out: no signature can see it, and the model trains
# silently. `check(q, "batch {self.n_head} seq head_dim")` holds a tensor inside a checked function to the call's
# own dimension names: `batch` and `seq` as `x` bound them, `{self.n_head}` read from the module, `head_dim` bound
# by the first check and held by the next ones (and by the return annotation, if it named it). Here is nanoGPT's
# class (its flash path, the config's fields as arguments) with the swap planted:

# %%
from transformer import check


class NanoGPTAttention(nn.Module):
    def __init__(self, n_embd=64, n_head=4, bias=True, dropout=0.0, swapped=False):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.n_embd, self.dropout, self.swapped = n_head, n_embd, dropout, swapped

    @checked
    def forward(self, x: Float[Tensor, "batch seq {self.n_embd}"]) -> Float[Tensor, "batch seq {self.n_embd}"]:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        if self.swapped:  # the bug: head_dim where n_head belongs
            heads = (B, T, C // self.n_head, self.n_head)
        else:
            heads = (B, T, self.n_head, C // self.n_head)
        k = k.view(heads).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(heads).transpose(1, 2)
        v = v.view(heads).transpose(1, 2)
        check(q, "batch {self.n_head} seq head_dim")
        check(k, "batch {self.n_head} seq head_dim")
        check(v, "batch {self.n_head} seq head_dim")
        y = scaled_dot_product_attention(q, k, v, attn_mask=None,
                                         dropout_p=self.dropout if self.training else 0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


swapped = NanoGPTAttention(swapped=True)
x = torch.randn(2, 9, 64)
with tt.checks(False):
    print("checks off: output", tuple(swapped(x).shape), "and no error")
try:
    swapped(x)
except tt.TypeCheckError as error:
    print(error)
torch._dynamo.reset()
try:
    torch.compile(swapped, fullgraph=True)(x)
except tt.TypeCheckError as error:
    print("compiled:", str(error).splitlines()[0])
valid = NanoGPTAttention().eval()
torch.testing.assert_close(torch.compile(valid, fullgraph=True)(x), valid(x))
print("the valid module, compiled with fullgraph=True: the eager output")

# %% [markdown]
# ## torch.compile keeps the contract
#
# jaxtyping cannot check while `torch.compile` traces (it misfires on the fake tensors Dynamo traces with), so
# while tracing `checked` hands the call to a checker of its own that Dynamo can trace: a valid call compiles to
# one graph that holds no check (`fullgraph=True` holds), and an invalid call raises the same `TypeCheckError`,
# with the same first line, while it is traced (before any later operation can fail on the wrong shape).

# %%
compiled = torch.compile(model, fullgraph=True)
torch.testing.assert_close(compiled(ids), model(ids))
print("compiled = eager on valid input")
try:
    compiled(ids.float())  # token ids as floats
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])
    print(str(error).splitlines()[1])

# %% [markdown]
# ## Attention on our kernel: the drop-in
#
# `transformer.scaled_dot_product_attention` has torch's signature and torch's semantics (masks, `is_causal`,
# `scale`, `dropout_p`, `enable_gqa`, the errors), so swapping it in is one import line. The `attend` method
# looks the name up when it runs, so re-importing it is enough here:

# %%
from transformer import scaled_dot_product_attention  # noqa: E402, F811 (the swap)

logging.basicConfig(format="%(name)s: %(message)s")
logging.getLogger("transformer.sdpa").setLevel(logging.DEBUG)  # say which implementation runs, and why
with torch.no_grad():
    ours = model(ids)
logging.getLogger("transformer.sdpa").setLevel(logging.WARNING)

# %% [markdown]
# With no backend named it runs `auto`: the kernel where it takes the inputs **on CUDA**, torch's own function
# otherwise, so on a CPU `auto` gives torch's function (the log says so, once per attention call: two blocks).
# The kernel is asked for by name with `backend="triton"` on one call, or with a `use_backend("triton")` block
# around any code. A backend asked for by name never falls back: if the kernel cannot take the inputs it raises
# `ValueError` with the reason.
#
# Here the whole model runs on the kernel (on a CPU: through the interpreter), forward and backward, against the
# same model on `torch.nn.functional.scaled_dot_product_attention`:

# %%
def logits_and_grads(run):
    model.zero_grad()
    logits = run()
    logits.square().mean().backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


reference_logits, reference_grads = logits_and_grads(lambda: model(ids))  # auto: torch's function on the CPU
with tt.use_backend("triton"):
    kernel_logits, kernel_grads = logits_and_grads(lambda: model(ids))
print(f"logits: max difference {(kernel_logits - reference_logits).abs().max().item():.1e}")
print(f"gradients: max difference {max((a - b).abs().max().item() for a, b in zip(kernel_grads, reference_grads)):.1e}")

# %% [markdown]
# And one call, grouped-query attention with `enable_gqa` (8 query heads reading 2 key/value heads: query head h
# reads key/value head h // 4, as in torch), a boolean padding mask (True = attend, broadcast over heads and
# queries), against torch's function with the same arguments:

# %%
q = torch.randn(2, 8, 12, 32)
k, v = torch.randn(2, 2, 12, 32), torch.randn(2, 2, 12, 32)
keep = (torch.arange(12) < torch.tensor([[12], [7]]))[:, None, None, :]  # (batch, 1, 1, keys): row 1 is padded
out = tt.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True, backend="triton")
expected = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
print(f"GQA on the kernel: max difference {(out - expected).abs().max().item():.1e}")
try:
    tt.scaled_dot_product_attention(q, k, v, attn_mask=keep.float(), enable_gqa=True, backend="triton")
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## A Hugging Face model on the kernel
#
# `transformer.integrations.huggingface.register()` (once per process) adds `"typed_transformer"` to transformers'
# attention implementations: the attention function, and transformers' own mask builder under the same name
# (without it a model builds no mask for a new name, and padding and causality would be lost). Any model that uses
# transformers' attention interface can then be loaded with `attn_implementation="typed_transformer"`.
#
# A tiny Llama (grouped-query attention, rotary positions), built from a config in code, nothing downloaded: one
# copy on our attention, one on transformers' `eager` attention, the same weights, a batch with left padding.
# `_from_config` writes the choice into the config it is given, so each model gets its own copy.

# %%
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's note about Jupyter widgets
import transformers  # noqa: E402

from transformer.integrations import huggingface  # noqa: E402

huggingface.register()
config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
llama = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="typed_transformer")
eager = transformers.LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="eager")
eager.load_state_dict(llama.state_dict())
llama.eval()
eager.eval()

tokens = torch.randint(1, 64, (2, 10))
attention_mask = torch.ones(2, 10, dtype=torch.long)
attention_mask[1, :3] = 0  # the second sequence is left-padded by 3 tokens
real = attention_mask.bool()
with torch.no_grad():
    expected = eager(tokens, attention_mask=attention_mask).logits
    on_auto = llama(tokens, attention_mask=attention_mask).logits
    with tt.use_backend("triton"):
        on_kernel = llama(tokens, attention_mask=attention_mask).logits
print("attn_implementation:", llama.config._attn_implementation)
print(f"auto (torch's function on the CPU) vs eager: {(on_auto - expected)[real].abs().max().item():.1e}")
print(f"the kernel vs eager:                         {(on_kernel - expected)[real].abs().max().item():.1e}")

# %% [markdown]
# The differences are float32 rounding. They are compared on the real tokens only: what a model computes at
# padded positions is not defined the same way by every implementation.
#
# ## What runs where
#
# * Contracts (`checked`, the annotation types): everywhere, eager and compiled; a few microseconds per checked
#   call with checks on, one context-variable lookup with checks off.
# * The drop-in and the Hugging Face attention: everywhere; the kernel itself on CUDA (`auto` chooses it there
#   when it takes the inputs) or, asked for by name, under `TRITON_INTERPRET=1` on a CPU as here.
# * torch's flash-attention provider registry (`transformer.integrations.sdpa_registry`): CUDA only, since the
#   flash path it replaces exists on CUDA only.
#
# The tests that hold these promises:
# `tests/test_contracts_user.py::test_your_own_dimension_names_work_eagerly_and_compiled`,
# `tests/test_sdpa_dropin.py::test_random_cases_match_torch_forward_and_gradients`,
# `tests/test_sdpa_dropin.py::test_the_drop_in_compiles_in_one_graph_and_gives_torchs_answer`,
# `tests/test_huggingface.py::test_llama_gqa_rope_left_padding_matches_eager_logits_and_gradients`. Costs and
# limits: [Use it in your project](../docs/integrations.md).
