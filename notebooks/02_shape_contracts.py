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
# # Shape contracts: what they catch, how they read, what they cost
#
# Every `forward` in typed-transformer, and every public function that takes tensors, states the shapes it takes
# and returns, with the paper's dimension names. The signatures are checked at run time (jaxtyping annotations,
# checked by beartype through one decorator, `transformer.contracts.checked`). This notebook shows what each
# contract catches and how its error reads, the guards that are not shapes, the switch that turns the checks
# off, `torch.compile` with checks, and how the invariants of the formal references map to our contracts and
# tests. Reference: [Contracts](../docs/contracts.md), [Guarantees](../docs/guarantees.md).

# %%
import inspect
import os
import subprocess
import sys
import time

import torch

import transformer as tt
from transformer.contracts import DIMENSIONS, Float, Int, Tensor, checked

torch.manual_seed(0)
torch.set_num_threads(1)
model = tt.make_model(src_vocab=11, tgt_vocab=11, N=2, d_model=32, d_ff=64, h=2, dropout=0.0).eval()  # d_k = 16
src = torch.tensor([[1, 2, 3, 4, 5, 0, 0], [5, 4, 3, 2, 1, 7, 8]])  # batch 2, src_len 7
tgt = torch.tensor([[1, 2, 3, 0], [1, 5, 4, 3]])  # batch 2, tgt_len 4
src_mask, tgt_mask = tt.padding_mask(src, 0), tt.target_mask(tgt, 0)
print(
    "src_mask",
    tuple(src_mask.shape),
    "tgt_mask",
    tuple(tgt_mask.shape),
    "->",
    tuple(model(src, tgt, src_mask, tgt_mask).shape),
)

# %% [markdown]
# ## A contract is a signature
#
# `DecoderLayer.forward` says: `x` is (batch, tgt_len, d_model) floats, the memory (batch, src_len, d_model), the
# masks booleans that broadcast (`#batch`: that axis may be 1) over the scores they mask, and the output has `x`'s
# shape. `{self.size}` reads the layer's own width. A name is bound the first time it is seen and must agree
# everywhere else in the same call, the return value included.

# %%
print(inspect.signature(tt.DecoderLayer.forward))

# %% [markdown]
# The names come from one vocabulary, `transformer.contracts.DIMENSIONS` (a test fails if an annotation uses
# another):

# %%
for name, meaning in DIMENSIONS.items():
    print(f"{name:>8}: {meaning}")

# %% [markdown]
# ## What each contract catches, and how its error reads
#
# Each case below is a plausible mistake. The first line of every message names the function (and its callers,
# `A > B`), the argument or the return value, the actual dtype and shape, the expected annotation, and the sizes
# bound so far.

# %%
q8, k8, v8 = torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)


class Squash(torch.nn.Module):
    """A sub-layer that (wrongly) halves the width."""

    def forward(self, x):
        return x[..., : x.size(-1) // 2]


mistakes = {
    "the target mask passed as the source mask": lambda: model(src, tgt, tgt_mask, tgt_mask),
    "a float mask (0/1) instead of a boolean one": lambda: model(src, tgt, src_mask.float(), tgt_mask),
    "source and target batches of different sizes": lambda: model(src, tgt[:1], src_mask, tgt_mask[:1]),
    "an input of the wrong width into a layer": lambda: model.encoder.layers[0](torch.randn(2, 7, 48), src_mask),
    "queries and keys of different d_k (Rocq invariant 1)": lambda: tt.attention(q8, k8[..., :4], v8),
    "keys and values of different lengths": lambda: tt.attention(q8, k8, v8[:, :5]),
    "residual operands of different shapes (Rocq invariant 3)": lambda: tt.layers.residual(
        torch.randn(2, 7, 32), torch.randn(2, 7, 16)
    ),
    "a sub-layer that changes the shape": lambda: tt.SublayerConnection(32, 0.0)(torch.randn(2, 7, 32), Squash()),
    "a structured mask sized for another batch": lambda: model.encode(
        src, tt.AttentionMask(key_lengths=torch.tensor([7, 7, 7]))
    ),
    "token ids as floats": lambda: model.encode(src.float(), src_mask),
}
for what, call in mistakes.items():
    try:
        call()
        print(f"- {what}: NOT CAUGHT")
    except Exception as error:
        print(f"- {what}\n    {type(error).__name__}: {str(error).splitlines()[0]}")

# %% [markdown]
# Under the first line, jaxtyping's full report follows: every argument's type and shape, and the bindings.

# %%
try:
    model.decode(model.encode(src, src_mask), tgt_mask, tgt, tgt_mask)
except tt.TypeCheckError as error:
    print(error)

# %% [markdown]
# ### Your own code, with the same contracts
#
# `checked` works on any function or method: annotate, decorate, and the shapes relate across arguments and the
# return value. Here a mean over the real (non-padded) positions promises one d_model vector per row:


# %%
@checked
def masked_mean(
    x: Float[Tensor, "batch seq d_model"], keep: tt.contracts.Bool[Tensor, "batch seq"]
) -> Float[Tensor, "batch d_model"]:
    keep = keep.unsqueeze(-1).to(x.dtype)
    return (x * keep).sum(1) / keep.sum(1).clamp_min(1)


memory = model.encode(src, src_mask)
print(masked_mean(memory, src != 0).shape)
try:
    masked_mean(memory, tgt != 0)  # the target's padding, 4 positions, for a 7-position memory
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])


@checked
def broken_mean(x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch d_model"]:
    return x.mean(0)  # the wrong axis: (seq, d_model)


try:
    broken_mean(memory)
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])

# %% [markdown]
# ## Guards: the invariants that are not shapes
#
# Some mistakes have the right shape and a wrong value. Those are checked where they are cheapest and clearest,
# raise `ValueError` naming the value and the limit, and stay on when the shape checks are switched off (they
# prevent an index error inside `nn.Embedding`, or on a GPU a device-side assert that poisons the CUDA context).

# %%
too_long = torch.ones(1, 5001, dtype=torch.long)
guards = {
    "a head count that does not divide d_model (Rocq invariant 2)": lambda: tt.TransformerConfig(
        src_vocab=11, tgt_vocab=11, d_model=512, n_heads=7
    ),
    "a token id outside the vocabulary": lambda: model.encode(torch.tensor([[1, 2, 42]]), None),
    "a sequence longer than max_len (Rocq invariant 6)": lambda: model.encode(too_long, None),
    "an empty source": lambda: model.encode(torch.ones(2, 0, dtype=torch.long), None),
    "decoding past the positions the model can encode": lambda: tt.greedy_decode(
        model, src, src_mask, max_len=6000, start_symbol=1
    ),
}
for what, call in guards.items():
    try:
        call()
        print(f"- {what}: NOT CAUGHT")
    except ValueError as error:
        print(f"- {what}\n    {type(error).__name__}: {str(error).splitlines()[0]}")

# %% [markdown]
# ## The checks switch
#
# Process-wide with `tt.set_checks(False)`, for a block with `with tt.checks(False):` (the previous state comes back
# afterwards), or for a whole process with the environment variable `TYPED_TRANSFORMER_CHECKS=0` (read at
# import). Off means one boolean test per call: the checker is not entered.
#
# With checks off, a shape mistake is no longer named at the entry: it ends in torch's own error deep inside, or,
# where torch broadcasts, in a tensor of the wrong meaning. The guards still run.

# %%
with tt.checks(False):
    print("checks enabled inside the block:", tt.checks_enabled())
    try:
        model(src, tgt, tgt_mask, tgt_mask)
    except Exception as error:
        print("the swapped mask, unchecked:", type(error).__name__, "-", str(error).splitlines()[0])
    try:
        model.encode(torch.tensor([[1, 2, 42]]), None)
    except ValueError as error:
        print("the bad token id, unchecked:", type(error).__name__, "-", str(error).splitlines()[0])
print("checks enabled after the block:", tt.checks_enabled())

# %%
probe = "import transformer as tt; print('checks enabled with TYPED_TRANSFORMER_CHECKS=0:', tt.checks_enabled())"
result = subprocess.run(
    [sys.executable, "-c", probe],
    env={**os.environ, "TYPED_TRANSFORMER_CHECKS": "0"},
    capture_output=True,
    text=True,
    check=True,
)
print(result.stdout.strip())

# %% [markdown]
# ### What checks cost
#
# A checked call costs microseconds; on this toy model that fixed cost is most of a forward pass. On a model of a
# realistic size it is a few percent: the [benchmarks page](../docs/benchmarks.md) records 5 to 8% for a
# d_model 128 model on a 2-core CPU (the target is at most 10%). `Trainer(checks="first")` checks the first
# step of a run and runs the rest unchecked.


# %%
def forward_ms(enabled, repeats=30):
    with tt.checks(enabled), torch.no_grad():
        model(src, tgt, src_mask, tgt_mask)  # warm up
        start = time.perf_counter()
        for _ in range(repeats):
            model(src, tgt, src_mask, tgt_mask)
    return (time.perf_counter() - start) / repeats * 1e3


print(f"toy model forward: checks on {forward_ms(True):.2f} ms, off {forward_ms(False):.2f} ms")

# %% [markdown]
# ## torch.compile with checks
#
# A compiled model keeps its contracts. jaxtyping cannot check while Dynamo traces (its checks misfire on the fake
# tensors Dynamo traces with, pytorch#122093), so while compiling `checked` checks the same annotations with a small
# checker of its own that Dynamo traces like the model's code: a valid model still compiles as one graph
# (`fullgraph=True`), keeps no check at run time and gives the eager output.

# %%
start = time.perf_counter()
compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
same = torch.allclose(compiled(src, tgt, src_mask, tgt_mask), model(src, tgt, src_mask, tgt_mask), atol=1e-6)
print(f"compiled in {time.perf_counter() - start:.1f} s; matches eager: {same}")

# %% [markdown]
# What does a compiled model say when it is given a wrong shape? The eager contract error: the same
# `TypeCheckError` with the same first line, raised while the call is traced (a `CompiledContractError`, which is a
# `TypeCheckError`), not an error from inside the tracer. This cell prints both, and whether they agree
# ([Contracts](../docs/contracts.md#torchcompile) describes how compiled models are checked).


# %%
def first_line(call):
    try:
        call()
    except Exception as error:
        kind = "TypeCheckError" if isinstance(error, tt.TypeCheckError) else type(error).__name__
        return f"{kind}: {str(error).splitlines()[0]}"
    return "no error"


eager_error = first_line(lambda: model(src, tgt, tgt_mask, tgt_mask))
compiled_error = first_line(lambda: compiled(src, tgt, tgt_mask, tgt_mask))
print("eager:   ", eager_error)
print("compiled:", compiled_error)
print("the same error:", eager_error == compiled_error)

# %% [markdown]
# ## From the formal references to contracts and tests
#
# The Rocq "Annotated Transformer" (jwiegley/rocq-transformer) proves six shape invariants with dependent types.
# Each is a contract here, and a test makes sure the contract refuses a violation (paths under `tests/`; the full
# table of 30-odd guarantees, with the laws of softmax and attention and the gradient checks, is on the
# [Guarantees page](../docs/guarantees.md)).
#
# | # | Rocq invariant | Our contract | Test |
# |---|---|---|---|
# | 1 | Q·Kᵀ needs matching inner dimensions (d_k of queries = d_k of keys) | `attention`: `*batch q_len d_k` and `*batch k_len d_k` (the drop-in `scaled_dot_product_attention` raises torch's `RuntimeError`) | `properties/test_rocq_invariants.py::test_qk_inner_dimensions_must_agree_in_the_reference` |
# | 2 | h divides d_model | `TransformerConfig` construction (the message lists head counts that would) | `properties/test_rocq_invariants.py::test_heads_must_divide_d_model` |
# | 3 | Residual operands have equal shapes | `layers.residual`: `*batch d_model` twice, used by `SublayerConnection` | `properties/test_rocq_invariants.py::test_residual_operands_must_have_equal_shapes` |
# | 4 | Self-attention keeps (batch, seq, d_model) | `MultiHeadedAttention.forward`: `batch q_len {self.d_model}` in and out | `properties/test_rocq_invariants.py::test_self_attention_whose_output_changes_shape_breaks_its_contract` |
# | 5 | Each decoding step adds exactly one token | `greedy_step`: `Int[batch steps] -> Int[batch steps+1]`, plus a check that holds with checks off | `properties/test_decoding_properties.py::test_each_decoding_step_extends_by_exactly_one` |
# | 6 | Sequence length <= max_len | `PositionalEncoding` (`validate_length`), `greedy_decode`'s `max_len` | `properties/test_rocq_invariants.py::test_positional_encoding_refuses_sequences_longer_than_max_len` |
#
# Each of them, violated on purpose:

# %%
mha = model.encoder.layers[0].self_attn


def step_two(ys):
    return torch.cat([ys, ys[:, -1:], ys[:, -1:]], dim=1)  # what a buggy step would return


@checked
def one_step(ys: Int[Tensor, "batch steps"]) -> Int[Tensor, "batch steps+1"]:
    return step_two(ys)


invariants = {
    1: lambda: tt.attention(q8, k8[..., :4], v8),
    2: lambda: tt.TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=32, n_heads=3),
    3: lambda: tt.layers.residual(torch.randn(2, 7, 32), torch.randn(2, 7, 16)),
    4: lambda: mha(torch.randn(2, 7, 48), torch.randn(2, 7, 48), torch.randn(2, 7, 48)),
    5: lambda: one_step(torch.ones(2, 3, dtype=torch.long)),
    6: lambda: tt.PositionalEncoding(32, 0.0, max_len=10)(torch.zeros(1, 11, 32)),
}
for number, call in invariants.items():
    print(f"invariant {number}: {first_line(call)}")

# %% [markdown]
# Invariant 5 is shown on a stand-in function with `greedy_step`'s contract; in the package, `greedy_step` and
# `greedy_decode` state it themselves and also check it with an explicit error when contracts are off (the test
# above breaks a real step to see it refused).

# %% [markdown]
# ## Proved for every size
#
# A contract is checked at the sizes a call has. Here is a cross-attention score function with a bug that every
# test at the usual sizes misses: it reshapes the keys with the *query* length. Self-attention tests (as many keys
# as queries) all pass:

# %%
from transformer.proofs import prove


class CrossScores(torch.nn.Module):
    def __init__(self, fixed: bool = False):
        super().__init__()
        self.fixed = fixed

    @checked
    def forward(
        self, q: Float[Tensor, "batch q_len 8"], k: Float[Tensor, "batch k_len 8"]
    ) -> Float[Tensor, "batch q_len k_len"]:
        batch, q_len, width = q.shape
        keys = k if self.fixed else k.reshape(batch, q_len, width)  # the bug: the keys take the query length
        return q @ keys.transpose(1, 2) / width**0.5


scores = CrossScores()
for batch, length in [(2, 6), (4, 10), (1, 3)]:  # the usual sizes: as many keys as queries
    scores(torch.randn(batch, length, 8), torch.randn(batch, length, 8))
print("every eager call at the usual sizes passes")

# %% [markdown]
# `transformer.proofs.prove` exports the module with the contract's sizes symbolic over ranges and its checks on
# (docs/proved-shapes.md): every comparison on a size, the contract's and the model's own, is decided for every
# size in the ranges, or is reported with the relation it needs and sizes that break it, re-run eagerly:

# %%
sizes = {"batch": (1, 64), "q_len": (1, 512), "k_len": (1, 512)}
report = prove(scores, torch.randn(2, 6, 8), torch.randn(2, 6, 8), sizes=sizes)
print(report)
assert not report.proved and report.counterexamples[0].relation == "k_len == q_len"

# %% [markdown]
# The fix (the keys keep their own length) is proved for every batch from 1 to 64 and every pair of lengths up to 512:

# %%
fixed = prove(CrossScores(fixed=True), torch.randn(2, 6, 8), torch.randn(2, 6, 8), sizes=sizes)
print(fixed)
assert fixed.proved
