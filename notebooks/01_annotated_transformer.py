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
# # The Annotated Transformer, with checked shapes
#
# *Attention Is All You Need* (Vaswani et al., 2017), built piece by piece in the paper's order, the way the
# [Annotated Transformer](https://nlp.seas.harvard.edu/annotated-transformer/) does it — with the modules of
# this package, whose every `forward` states and checks its tensor shapes. Along the way we print the shapes at
# each step and draw what the tutorial draws: the masks, the positional encodings, the learning-rate schedule,
# label smoothing, a training curve and the attention maps of a trained model.
#
# Everything runs on a CPU in about two minutes: the models are scaled down (d_model 64 instead of 512), and the
# second example is a synthetic translation task (dates in words to ISO 8601) instead of the tutorial's
# German-English corpus, which cannot be downloaded here.
#
# The source of this notebook is `notebooks/01_annotated_transformer.py` (a jupytext script); the test suite runs
# it top to bottom. Where our code differs from the tutorial on purpose, the
# [paper-to-code page](../docs/paper-to-code.md) says why.

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import transformer as tt

torch.manual_seed(0)
torch.set_num_threads(1)  # these small matrices run fastest on one thread
plt.rcParams.update({"figure.dpi": 80, "figure.figsize": (6, 3.2), "axes.grid": False})


def table(header, rows):
    """A Markdown table (rendered in Jupyter and on the documentation site)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    display(Markdown("\n".join(lines)))


# %% [markdown]
# ## Model architecture (section 3)
#
# > Most competitive neural sequence transduction models have an encoder-decoder structure. Here, the encoder
# > maps an input sequence of symbol representations (x1, ..., xn) to a sequence of continuous representations
# > z = (z1, ..., zn). Given z, the decoder then generates an output sequence (y1, ..., ym) of symbols one
# > element at a time.
#
# `EncoderDecoder` holds the five parts of Figure 1: the source and target embeddings, the encoder, the decoder
# and the `Generator` (linear + log-softmax). `make_model` builds one from the tutorial's arguments; every
# hyper-parameter goes through a frozen, validated `TransformerConfig`.

# %%
model = tt.make_model(src_vocab=11, tgt_vocab=11, N=2, d_model=64, d_ff=128, h=4, dropout=0.1)
print(model.config)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
print({name: type(module).__name__ for name, module in model.named_children()})

# %% [markdown]
# ### The shapes at each step
#
# A forward pass on a batch of 2 sources of length 7 (the first padded at the end) and targets of length 5. A
# forward hook on each part records what goes in and what comes out; `batch`, `src_len`, `tgt_len`, `d_model`
# and `vocab` are the names the contracts give these dimensions.

# %%
src = torch.tensor([[1, 4, 7, 3, 9, 0, 0], [1, 2, 8, 5, 6, 10, 3]])
tgt = torch.tensor([[1, 4, 7, 3, 9], [1, 2, 8, 5, 6]])
src_mask, tgt_mask = tt.padding_mask(src, pad_id=0), tt.target_mask(tgt, pad_id=0)

steps = []
watch = ["src_embed", "encoder.layers.0.self_attn", "encoder.layers.0.feed_forward", "encoder",
         "tgt_embed", "decoder.layers.0.self_attn", "decoder.layers.0.src_attn", "decoder", "generator"]


def shape_of(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


handles = [dict(model.named_modules())[name].register_forward_hook(
    lambda module, args, out, name=name: steps.append((name, type(module).__name__, shape_of(args[0]), shape_of(out))))
    for name in watch]
model.eval()
log_probs = model.generator(model(src, tgt, src_mask, tgt_mask))
for handle in handles:
    handle.remove()
table(["module", "class", "first input", "output"], [(f"`{n}`", c, f"`{i}`", f"`{o}`") for n, c, i, o in steps])

# %% [markdown]
# The shapes are not only printed: they are part of each signature. `MultiHeadedAttention.forward`, for example,
# promises its output has the query's length and the model's width:

# %%
import inspect

print(inspect.signature(tt.MultiHeadedAttention.forward))

# %% [markdown]
# A wrong shape is refused where it enters, with the argument, the expected annotation and the sizes already
# bound. Here the encoder's output (the memory, 7 positions) is given in place of the target embeddings (5
# positions): the first argument binds `tgt_len=7`, so the 5 x 5 target mask no longer fits, and the message says
# so.

# %%
memory = model.encode(src, src_mask)
try:
    model.decoder(memory, memory, src_mask, tgt_mask)
except tt.TypeCheckError as error:
    print(str(error).splitlines()[0])

# %% [markdown]
# ## Encoder and decoder stacks (section 3.1)
#
# > The encoder is composed of a stack of N = 6 identical layers. Each layer has two sub-layers. The first is a
# > multi-head self-attention mechanism, and the second is a simple, position-wise fully connected feed-forward
# > network. We employ a residual connection around each of the two sub-layers, followed by layer normalization.
#
# `Encoder` is N deep copies of one `EncoderLayer` (`clones`) and a final `LayerNorm`. Each sub-layer is wrapped in a
# `SublayerConnection`: `x + Dropout(Sublayer(LayerNorm(x)))` with `norm_placement="pre"` (the tutorial's code,
# our default) or `LayerNorm(x + Dropout(Sublayer(x)))` with `"post"` (the paper's formula).

# %%
layer = model.encoder.layers[0]
print(type(model.encoder).__name__, "of", len(model.encoder.layers), type(layer).__name__, "+ a final", type(model.encoder.norm).__name__)
print("sub-layers:", type(layer.self_attn).__name__, "and", type(layer.feed_forward).__name__,
      "each in a", type(layer.sublayer[0]).__name__, f"(norm_placement={layer.sublayer[0].norm_placement!r})")

# %% [markdown]
# Our `LayerNorm` is `torch.nn.LayerNorm`'s formula (biased variance, eps inside the square root); the tutorial's
# used the unbiased standard deviation plus eps, which differs noticeably for short rows:

# %%
x = torch.randn(3, 8)
ours, reference = tt.LayerNorm(8, eps=1e-6), torch.nn.LayerNorm(8, eps=1e-6)
tutorial = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6)
print("max |ours - torch.nn.LayerNorm| =", f"{(ours(x) - reference(x)).abs().max().item():.1e}")
print("max |ours - the tutorial's|     =", f"{(ours(x) - tutorial).abs().max().item():.3f}")

# %% [markdown]
# ### The decoder and its masks
#
# > We also modify the self-attention sub-layer in the decoder stack to prevent positions from attending to
# > subsequent positions. This masking, combined with fact that the output embeddings are offset by one position,
# > ensures that the predictions for position i can depend only on the known outputs at positions less than i.
#
# Masks say **True = may attend**. `subsequent_mask(n)` is the causal pattern: row i (a query) may see columns
# j <= i (keys).

# %%
fig, ax = plt.subplots(figsize=(3.4, 3.4))
ax.imshow(tt.subsequent_mask(20)[0], cmap="Greens")
ax.set(title="subsequent_mask(20)", xlabel="key position j", ylabel="query position i")
plt.show()

# %% [markdown]
# A batch also hides padding. `padding_mask` (batch, 1, src_len) hides padded source keys from every query;
# `target_mask` (batch, tgt_len, tgt_len) is causal, hides padded target keys **and** padded query rows (the
# tutorial lets padded positions attend; here their rows are empty and output zeros). Drawn for a batch whose
# second row is padded after three tokens:

# %%
padded_src = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 5, 6, 0, 0, 0]])
padded_tgt = torch.tensor([[1, 5, 6, 7, 8], [1, 5, 6, 0, 0]])
masks = {"padding_mask (row 2)": tt.padding_mask(padded_src, 0)[1].expand(6, 6),
         "target_mask (row 1)": tt.target_mask(padded_tgt, 0)[0],
         "target_mask (row 2)": tt.target_mask(padded_tgt, 0)[1]}
fig, axes = plt.subplots(1, 3, figsize=(8, 2.9))
for ax, (title, mask) in zip(axes, masks.items()):
    ax.imshow(mask, cmap="Greens", vmin=0, vmax=1)
    ax.set(title=title, xlabel="key", ylabel="query")
fig.tight_layout()
plt.show()

# %% [markdown]
# The same information travels in a structured form, `AttentionMask`, which is what `Batch` builds: a causal
# flag and lengths instead of a tensor, so that the fused attention kernel can skip masked blocks. It converts to
# the very same dense mask:

# %%
structured = tt.AttentionMask.target(padded_tgt, pad_id=0)
print(structured)
print("equal to target_mask:", torch.equal(structured.to_dense(5, 5), tt.target_mask(padded_tgt, 0)))

# %% [markdown]
# ## Attention (section 3.2)
#
# > An attention function can be described as mapping a query and a set of key-value pairs to an output [...]
# > We compute the matrix of outputs as Attention(Q, K, V) = softmax(QKᵀ / √d_k) V.
#
# `transformer.attention` is that formula, the reference every backend is tested against. It returns the output
# and the probabilities. A masked score is set to the dtype's most negative value (not the tutorial's `-1e9`,
# which float16 cannot hold), and a query row that may attend nothing outputs zeros rather than an average.

# %%
q, k, v = torch.randn(1, 4, 8), torch.randn(1, 6, 8), torch.randn(1, 6, 8)
mask = torch.tensor([[[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]]], dtype=torch.bool)
out, p_attn = tt.attention(q, k, v, mask)
print("q", tuple(q.shape), "k", tuple(k.shape), "v", tuple(v.shape), "-> output", tuple(out.shape), "probabilities", tuple(p_attn.shape))
print("rows of probabilities sum to", p_attn.sum(-1).tolist())
print("the fully masked query row outputs", out[0, 3].tolist())

# %% [markdown]
# ### Multi-head attention (section 3.2.2)
#
# > MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O where head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) [...]
# > we employ h = 8 parallel attention layers, or heads. For each of these we use d_k = d_v = d_model / h = 64.
#
# `MultiHeadedAttention` projects with one `Linear` per role (`q_proj`, `k_proj`, `v_proj`, `out_proj`), splits
# d_model into h heads of d_k, attends per head and concatenates:

# %%
mha = model.encoder.layers[0].self_attn
x = model.src_embed(src)
heads = mha.split_heads(mha.q_proj(x))
print(f"h={mha.h}, d_model={mha.d_model}, d_k={mha.d_k}")
print("x", tuple(x.shape), "-> per-head queries", tuple(heads.shape), "-> output", tuple(mha(x, x, x, src_mask).shape))

# %% [markdown]
# ### Applications of attention in our model (section 3.2.3)
#
# Three uses: encoder self-attention (queries, keys and values all from the previous encoder layer), decoder
# self-attention (causally masked) and encoder-decoder attention (queries from the decoder, keys and values from
# the memory). In the decoder layer they are `self_attn` and `src_attn`; cross-attention's output follows the
# *query* length:

# %%
dec_layer = model.decoder.layers[0]
y = model.tgt_embed(tgt)
print("decoder input", tuple(y.shape), "memory", tuple(memory.shape))
print("self_attn(y, y, y)      ->", tuple(dec_layer.self_attn(y, y, y, tgt_mask).shape))
print("src_attn(y, memory, memory) ->", tuple(dec_layer.src_attn(y, memory, memory, src_mask).shape))

# %% [markdown]
# ## Position-wise feed-forward networks (section 3.3)
#
# > FFN(x) = max(0, x W1 + b1) W2 + b2. [...] The dimensionality of input and output is d_model = 512, and the
# > inner-layer has dimensionality d_ff = 2048.

# %%
ffn = model.encoder.layers[0].feed_forward
print(ffn)
print(tuple(x.shape), "->", tuple(ffn(x).shape))

# %% [markdown]
# ## Embeddings and softmax (section 3.4)
#
# > In the embedding layers, we multiply those weights by √d_model.
#
# `Embeddings` is a lookup table scaled by √d_model; the `Generator` maps d_model to log-probabilities over the
# vocabulary. (Sharing the target embedding with the generator is `TransformerConfig(tie_weights="target")`.)

# %%
emb = model.src_embed[0]
print(f"scale: {(emb(src) / emb.lut(src)).mean().item():.3f} = sqrt({emb.d_model}) = {math.sqrt(emb.d_model):.3f}")
print("generator:", tuple(memory.shape), "->", tuple(model.generator(memory).shape), "log-probabilities; each row sums to",
      f"{model.generator(memory).exp().sum(-1).mean().item():.4f}")

# %% [markdown]
# ## Positional encoding (section 3.5)
#
# > PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
#
# The tutorial's picture: dimensions 4 to 7 of the encoding added to a sequence of zeros, over 100 positions; each
# dimension is a sinusoid of its own wavelength. Beside it, the whole table for d_model 64.

# %%
pe = tt.PositionalEncoding(d_model=20, dropout=0.0)
curves = pe(torch.zeros(1, 100, 20))[0]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [3, 2]})
for dim in range(4, 8):
    ax1.plot(curves[:, dim], label=f"dim {dim}")
ax1.set(xlabel="position", title="PositionalEncoding(20): dimensions 4-7")
ax1.legend(fontsize=8)
table64 = tt.PositionalEncoding(d_model=64, dropout=0.0).pe[0, :100]
image = ax2.imshow(table64, aspect="auto", cmap="RdBu")
ax2.set(xlabel="dimension", ylabel="position", title="the table, d_model 64")
fig.colorbar(image, ax=ax2)
fig.tight_layout()
plt.show()

# %% [markdown]
# Sequences longer than the table are refused, with the length and the limit (a guard that stays on even when the
# shape checks are switched off):

# %%
short = tt.PositionalEncoding(d_model=8, dropout=0.0, max_len=10)
try:
    short(torch.zeros(1, 11, 8))
except ValueError as error:
    print(error)

# %% [markdown]
# ## Inference with an untrained model
#
# The tutorial's first test: greedy decoding with random weights produces some sequence of the right length.
# `greedy_decode` returns exactly `max_len` tokens, the start symbol included — a checked contract
# (`Int[Tensor, "batch {max_len}"]`).

# %%
model.eval()
test_src = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
print("untrained:", tt.greedy_decode(model, test_src, tt.padding_mask(test_src, 0), max_len=10, start_symbol=1).tolist())

# %% [markdown]
# ## Training (section 5)
#
# ### Batches and masking
#
# `Batch(src, tgt, pad)` holds a batch and its masks. The target is split into the decoder input `tgt[:, :-1]` and
# the labels `tgt_y = tgt[:, 1:]` (teacher forcing); `ntokens` counts the non-padding labels. Its masks are the
# structured `AttentionMask`s.

# %%
batch = tt.Batch(padded_src, padded_tgt, pad=0)
print("src", tuple(batch.src.shape), "tgt", tuple(batch.tgt.shape), "tgt_y", tuple(batch.tgt_y.shape), "ntokens", batch.ntokens)
print("src_mask:", batch.src_mask)
print("tgt_mask:", batch.tgt_mask)

# %% [markdown]
# ### Optimizer (section 5.3)
#
# > We used the Adam optimizer with β1 = 0.9, β2 = 0.98 and ε = 10⁻⁹. We varied the learning rate over the course
# > of training, according to the formula: lrate = d_model^−0.5 · min(step_num^−0.5, step_num · warmup_steps^−1.5).
#
# `rate(step, model_size, factor, warmup)` is that formula (a `LambdaLR` multiplier; step 0 counts as 1). The
# tutorial's picture, for three settings:

# %%
fig, ax = plt.subplots()
for d_model, factor, warmup in [(512, 1, 4000), (512, 1, 8000), (256, 1, 4000)]:
    ax.plot([tt.rate(step, d_model, factor, warmup) for step in range(20000)], label=f"d_model {d_model}, warmup {warmup}")
ax.set(xlabel="step", ylabel="learning rate", title="The Noam schedule")
ax.legend()
plt.show()

# %% [markdown]
# ### Regularization: label smoothing (section 5.4)
#
# > During training, we employed label smoothing of value ε_ls = 0.1. This hurts perplexity, as the model learns
# > to be more unsure, but improves accuracy and BLEU score.
#
# `LabelSmoothing(size, padding_idx, smoothing)` is the KL divergence between a smoothed target distribution q and
# the model's log-probabilities, summed over non-padding rows. The loss is linear in the log-probabilities, so
# its gradient with respect to them is exactly −q: we draw q from the loss itself, for the tutorial's example (5
# classes, padding index 0, smoothing 0.4, its `style="annotated"`; the last label is padding, so its row is empty).

# %%
criterion = tt.LabelSmoothing(5, padding_idx=0, smoothing=0.4, style="annotated")
predict = torch.tensor([[0, 0.2, 0.7, 0.1, 0]] * 5).clamp_min(1e-9).log().requires_grad_(True)
criterion(predict, torch.tensor([2, 1, 0, 3, 3])).backward()
q = -predict.grad + 0.0  # (+ 0.0 turns -0.0 into 0.0 for printing)
fig, ax = plt.subplots(figsize=(3.6, 3.2))
image = ax.imshow(q, cmap="Blues")
ax.set(xlabel="class", ylabel="row (labels 2, 1, 0=pad, 3, 3)", title="target distribution q")
fig.colorbar(image)
plt.show()
print(q)

# %% [markdown]
# Label smoothing penalises a model that is too sure: the loss for a correct prediction first falls as the
# model becomes confident, then rises (the tutorial's second picture; 5 classes, smoothing 0.1).

# %%
criterion = tt.LabelSmoothing(5, padding_idx=0, smoothing=0.1, style="annotated")


def loss_at(x):
    d = x + 3
    predict = torch.tensor([[0, x / d, 1 / d, 1 / d, 1 / d]]).clamp_min(1e-9).log()
    return criterion(predict, torch.tensor([1])).item()


fig, ax = plt.subplots()
ax.plot(range(1, 100), [loss_at(x) for x in range(1, 100)])
ax.set(xlabel="confidence x (probability of the label = x / (x + 3))", ylabel="loss", title="Label smoothing penalises confidence")
plt.show()

# %% [markdown]
# ## A first example: the copy task
#
# > We can begin by trying out a simple copy-task. Given a random set of input symbols from a small vocabulary,
# > the goal is to generate back those same symbols.
#
# The tutorial's `data_gen`, `SimpleLossCompute` and `run_epoch`, with Adam(betas (0.9, 0.98), eps 1e-9) and the
# Noam schedule (factor 1, warmup 200 for this shorter run), 15 epochs of 20 batches of 80.

# %%
from torch.optim.lr_scheduler import LambdaLR

from transformer.tasks import data_gen

torch.manual_seed(0)
V = 11
copy_model = tt.make_model(V, V, N=2, d_model=64, d_ff=128, h=4, dropout=0.1)
loss_compute = tt.SimpleLossCompute(copy_model.generator, tt.LabelSmoothing(V, padding_idx=0, smoothing=0.0))
optimizer = torch.optim.Adam(copy_model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
scheduler = LambdaLR(optimizer, lr_lambda=lambda step: tt.rate(step, copy_model.d_model, factor=1.0, warmup=200))
data = torch.Generator().manual_seed(0)

history = []
start = time.perf_counter()
for epoch in range(15):
    copy_model.train()
    train_loss, _ = tt.run_epoch(data_gen(V, 80, 20, data), copy_model, loss_compute, optimizer, scheduler, mode="train")
    copy_model.eval()
    eval_loss, _ = tt.run_epoch(data_gen(V, 80, 5, data), copy_model, loss_compute, None, None, mode="eval")
    history.append((epoch + 1, train_loss, eval_loss))
print(f"trained 300 steps in {time.perf_counter() - start:.0f} s; final eval loss {eval_loss:.4f}")

fig, ax = plt.subplots()
ax.plot([h[0] for h in history], [h[1] for h in history], marker="o", label="train")
ax.plot([h[0] for h in history], [h[2] for h in history], marker="o", label="eval")
ax.set(yscale="log", xlabel="epoch (20 steps)", ylabel="loss per token", title="Copy task")
ax.legend()
plt.show()

# %% [markdown]
# ### Greedy and beam decoding
#
# Greedy decoding picks the most probable token at each step; beam search keeps the `beam_size` best
# hypotheses (scored with the GNMT length penalty) and, with `beam_size=1`, gives exactly greedy's tokens. Both
# use the key/value cache that the attention modules own: each step runs only the newest position.

# %%
copy_model.eval()
mask = tt.padding_mask(test_src, 0)
greedy = tt.greedy_decode(copy_model, test_src, mask, max_len=10, start_symbol=1)
beam = tt.beam_search(copy_model, test_src, mask, max_len=10, start_symbol=1, beam_size=4)
print("source:", test_src[0].tolist())
print("greedy:", greedy[0].tolist())
print("beam 4:", beam.tokens[0].tolist(), f"(score {beam.scores[0].item():.4f})")
unseen = next(data_gen(V, 200, 1, torch.Generator().manual_seed(123))).src
decoded = tt.greedy_decode(copy_model, unseen, tt.padding_mask(unseen, 0), max_len=10, start_symbol=1)
print(f"exact copies of 200 unseen sequences: {(decoded == unseen).all(dim=1).float().mean().item():.1%}")

# %% [markdown]
# ## A real(ish) example: dates in words to ISO 8601
#
# The tutorial's second example translates German to English (Multi30k). A corpus cannot be fetched here, so we use
# the package's synthetic translation task that needs attention: `DatesTask` rewrites dates written in words, in
# three word orders, into `YYYY-MM-DD`, one character per target token. Every tenth day is held out from
# training and used only for evaluation.

# %%
from transformer.tasks import DatesTask
from transformer.tasks.run import make_trainer

task = DatesTask()
g = torch.Generator().manual_seed(5)
example_src, example_tgt = task.sample(g, 3)
for s, t in zip(example_src, example_tgt):
    print(f"{task.source_text(s.tolist()):32s} -> {task.target_text(t.tolist())}")

# %% [markdown]
# `make_trainer` wires the task to a model (N=2, d_model 64, 4 heads), Adam with the Noam schedule (factor 2,
# warmup 200) and a `Trainer`, which records the training loss at every step and the held-out loss every 50.
# Contracts are checked on the first step and switched off afterwards (`checks="first"`: the shapes of these
# batches never change).

# %%
trainer = make_trainer(task, steps=400, seed=0, eval_every=50)
trainer.config.checks = "first"
start = time.perf_counter()
trainer.train()
print(f"trained {trainer.step} steps in {time.perf_counter() - start:.0f} s; held-out loss {trainer.history.eval_loss[-1][1]:.4f}")
dates_model = trainer.model.eval()

fig, ax = plt.subplots()
ax.plot(*zip(*trainer.history.train_loss), label="train (each step)", alpha=0.7)
ax.plot(*zip(*trainer.history.eval_loss), marker="o", label="held-out")
ax.set(yscale="log", xlabel="step", ylabel="loss per token", title="Dates task")
ax.legend()
plt.show()

# %%
sentences = ["july eighteenth, 1945", "fifth of june 1912", "twenty-first march 2004"]
for sentence, greedy_out, beam_out in zip(sentences, task.translate(dates_model, sentences), task.translate(dates_model, sentences, beam_size=4)):
    print(f"{sentence:26s} greedy -> {greedy_out}   beam 4 -> {beam_out}")
print(f"exact match on 500 held-out dates: {task.exact_match(dates_model, n=500):.1%}")

# %% [markdown]
# ## Attention visualization
#
# > To give a sense of the mechanics of attention, we can visualize the attention patterns.
#
# Setting `record_attention = True` on a `MultiHeadedAttention` keeps its last attention probabilities in `.attn`
# (batch, heads, queries, keys), computed by the eager reference. We decode one held-out date, then run the
# model once on the source and its decoded target with recording on.

# %%
sentence = "twenty-third of october 1987"
src_ids = task.source_tensor([sentence])
out_ids = task.translate_ids(dates_model, src_ids)
for module in dates_model.modules():
    if isinstance(module, tt.MultiHeadedAttention):
        module.record_attention = True
with torch.no_grad():
    dates_model(src_ids, out_ids[:, :-1], tt.padding_mask(src_ids, 0), tt.target_mask(out_ids[:, :-1], 0))
src_words = [task.src_vocab.tokens[i] for i in src_ids[0]]
tgt_chars = [task.tgt_vocab.tokens[i] for i in out_ids[0]]
print(sentence, "->", task.decode_target(out_ids[0].tolist()))


def draw(attn, rows, cols, title, n_heads=4):
    width, height = max(2.2, 0.3 * len(cols) + 0.9), max(2.4, 0.3 * len(rows) + 1.6)
    fig, axes = plt.subplots(1, n_heads, figsize=(width * n_heads, height))
    for head, ax in enumerate(axes):
        ax.imshow(attn[0, head], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ax.set_title(f"head {head}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    plt.show()


# %% [markdown]
# **Encoder self-attention**, layer 2: source words attending to source words.

# %%
draw(dates_model.encoder.layers[1].self_attn.attn, src_words, src_words, "encoder self-attention, layer 2")

# %% [markdown]
# **Decoder self-attention**, layer 2: each output character attends only to itself and earlier characters (the
# causal mask leaves the upper triangle empty).

# %%
draw(dates_model.decoder.layers[1].self_attn.attn, tgt_chars[:-1], tgt_chars[:-1], "decoder self-attention, layer 2")

# %% [markdown]
# **Encoder-decoder attention**, layer 2: for each output character (rows), where in the source the decoder looks.
# Look for the year's digits reading the year at the end of the source, and the month digits reading the month word.

# %%
draw(dates_model.decoder.layers[1].src_attn.attn, tgt_chars[:-1], src_words, "encoder-decoder attention, layer 2")
for module in dates_model.modules():
    if isinstance(module, tt.MultiHeadedAttention):
        module.record_attention = False

# %% [markdown]
# ## Where to go next
#
# * [Shape contracts](02_shape_contracts.ipynb): what each contract catches, the switch, `torch.compile`.
# * [Attention backends](03_attention_backends.ipynb): eager, `F.scaled_dot_product_attention` and our Triton kernel.
# * `typed-transformer train copy` and `typed-transformer train dates` run these trainings from the command line
#   and save checkpoints ([Training](../docs/training.md)).
