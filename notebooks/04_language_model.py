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
# # A GPT-style language model, trained on real text on a CPU
#
# A decoder-only language model is the paper's decoder without the encoder: a stack of layers with masked
# self-attention and a feed-forward network (no encoder-decoder attention, since there is no source), between
# token embeddings plus positions and a final normalisation. Each position attends to itself and earlier positions
# only (a causal `AttentionMask`), and the model learns to predict the next token. To generate, it predicts a
# token, appends it, and goes on; a key/value cache keeps each step to the newest position.
#
# This notebook trains one on text every machine with Python has, the source of a few standard-library modules,
# in well under a minute on one CPU thread, then generates with it: greedily and by sampling. It uses the same
# functions as the `typed-transformer train lm` command, shown at the end. Reference:
# [Language model](../docs/lm.md), [Your own data](../docs/data.md).

# %%
import copy
import inspect
import math
import os
import sysconfig
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from transformer.data import read_text, train_tokenizer
from transformer.lm import TransformerLM
from transformer.lm_config import LMConfig
from transformer.lm_generate import generate
from transformer.tasks.text_lm import lm_results, make_lm_trainer, prepare_lm_data

torch.manual_seed(0)
torch.set_num_threads(1)  # these small matrices run fastest on one thread
plt.rcParams.update({"figure.dpi": 80, "figure.figsize": (6, 3.2), "axes.grid": False})


def table(header, rows):
    """A Markdown table (rendered in Jupyter and on the documentation site)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    display(Markdown("\n".join(lines)))


# %% [markdown]
# ## The text
#
# Fifteen modules of the standard library (those of them this Python has) to train on, and one more,
# `textwrap.py`, held out: the model never trains on it, and its loss there says how well it predicts Python it
# has not seen. The figures below depend on the Python version, whose standard library they read.

# %%
stdlib = Path(sysconfig.get_paths()["stdlib"])
names = ["argparse", "bisect", "contextlib", "dataclasses", "difflib", "enum", "fractions", "functools", "heapq",
         "queue", "random", "shutil", "statistics", "threading", "tokenize"]
train_files = [str(stdlib / f"{name}.py") for name in names if (stdlib / f"{name}.py").is_file()]
valid_files = [str(stdlib / "textwrap.py")]
print(f"Python {sysconfig.get_python_version()}: {len(train_files)} training files, "
      f"{sum(os.path.getsize(f) for f in train_files) / 1e3:.0f} kB; held out: textwrap.py, "
      f"{os.path.getsize(valid_files[0]) / 1e3:.0f} kB")
queue = read_text(str(stdlib / "queue.py"))
print(queue[queue.index("    def qsize"):][:330])

# %% [markdown]
# ## A tokenizer
#
# `train_tokenizer` trains a byte-level BPE tokenizer (GPT-2's scheme, with Hugging Face `tokenizers`, offline):
# text is bytes, and the most frequent neighbours are merged into new tokens until the vocabulary is full. Any text
# round-trips and nothing is unknown. 1,000 tokens here: the 256 bytes, four special tokens (`<pad>` 0, `<s>` 1,
# `</s>` 2, `<unk>` 3) and the merges. See [Tokenizers](../docs/data.md#tokenizers).

# %%
tokenizer = train_tokenizer((read_text(f) for f in train_files), "bpe", vocab_size=1000)
print(tokenizer)

line = "    def __init__(self, width=70, initial_indent=''):\n        self.width = width\n"
ids = tokenizer.encode(line)
print(len(line), "characters ->", len(ids), "tokens:", ids)
print("|".join(tokenizer.decode([i]) for i in ids).replace("\n", "\\n"))
print("decodes to the same text:", tokenizer.decode(ids) == line)

# %% [markdown]
# Whole words and idioms of Python code (`self`, `def`, runs of indentation) became single tokens. The text is
# then tokenized once into a memory-mapped array on disk and cut into windows of 129 tokens, consecutive windows
# sharing one token: a window's first 128 tokens are the input, its last 128 the labels, so every token but the
# first is predicted once per pass ([Data on disk, batches by tokens](../docs/data.md#data-on-disk-batches-by-tokens)).
# Each file is a document, and `pack=True` (what `train lm` does by default) keeps a window's documents apart: the
# mask carries each token's document, and the label that begins a file is left out of the loss
# ([Packing](../docs/data.md#packing); more below, once there is a model).

# %%
workdir = tempfile.TemporaryDirectory()
data = prepare_lm_data(train_files, workdir.name, tokenizer=tokenizer, block=128, valid_files=valid_files, pack=True)
print(data.describe())
batch = data.train.make_batch([100, 101])
print("inputs", tuple(batch.tokens.shape), "labels", tuple(batch.labels.shape), "| mask: causal", batch.mask.causal,
      "| documents", batch.mask.documents.unique().tolist())
kept = batch.labels[:, :-1] != tokenizer.pad_id
print("the labels are the inputs shifted by one:", torch.equal(batch.labels[:, :-1][kept], batch.tokens[:, 1:][kept]))
print(repr(tokenizer.decode(batch.tokens[0, :24].tolist())))

# %% [markdown]
# ## The model
#
# `LMConfig` is a frozen, validated description of the model; here a small GPT-style one (the paper's
# formulation, pre-norm): 2 layers, d_model 96, 4 heads, d_ff 384, sinusoidal positions up to 256. No dropout:
# the run is short, a few passes over the text. `make_lm_trainer` is what `train lm` runs: it builds the model
# from the config (seeded), with Adam on the Noam schedule, batches of 2,048 tokens (16 windows) drawn from the
# seed, and the held-out windows for evaluation. It returns a [`Trainer`](../docs/training.md) ready to run.

# %%
config = LMConfig(vocab=tokenizer.vocab_size, n_layers=2, d_model=96, n_heads=4, d_ff=384, dropout=0.0,
                  attention_dropout=0.0, max_len=256, pad_id=tokenizer.pad_id)
trainer = make_lm_trainer(data, config, max_tokens=2048, steps=350, warmup=100, seed=0, eval_every=25)
model = trainer.model
print(config)
table(["part", "parameters"], [(f"`{name}`", f"{sum(p.numel() for p in part.parameters()):,}")
                               for name, part in model.named_children()]
      + [("**total**", f"**{sum(p.numel() for p in model.parameters()):,}**")])

# %% [markdown]
# Each layer is a `DecoderOnlyLayer`: causal self-attention, then the feed-forward network, each inside a residual
# connection. The shapes are part of the signatures, checked on every call (the trainer checks the first step
# and then runs unchecked, `checks="first"`): `forward` takes token ids (batch, seq) and returns hidden states
# (batch, seq, d_model), and the `generator` turns them into log-probabilities over the vocabulary.

# %%
print(type(model.layers[0]).__name__, "with", type(model.layers[0].self_attn).__name__, "and",
      type(model.layers[0].feed_forward).__name__)
print("forward", inspect.signature(TransformerLM.forward))
model.eval()
with torch.no_grad():
    hidden = model(batch.tokens)
    log_probs = model.generator(hidden)
print("tokens", tuple(batch.tokens.shape), "-> hidden", tuple(hidden.shape), "-> log-probabilities", tuple(log_probs.shape))

# %% [markdown]
# Position t sees tokens 0..t only: the model adds causality to whatever mask it is given. Changing token 100
# leaves the predictions at positions 0 to 99 exactly as they were (the test is
# `test_lm.py::test_a_dense_mask_gains_causality_and_a_structured_one_its_causal_flag`):

# %%
changed = batch.tokens.clone()
changed[:, 100] = (changed[:, 100] + 1) % config.vocab
with torch.no_grad():
    difference = (model.generator(model(changed)) - log_probs).abs().amax(dim=(0, 2))
print(f"positions 0-99: largest change {difference[:100].max().item():.1e}")
print(f"positions 100-127: every one changed, by at least {difference[100:].min().item():.2f}")

# %% [markdown]
# ## Packed rows: documents kept apart
#
# A window that holds the end of one file and the start of the next is a *packed row*: with the documents in its
# mask (`AttentionMask(documents=...)`), no token attends to the other file, and the positions restart at the
# second file, so the row computes exactly what its two pieces compute alone (in float64, to rounding). Without the
# documents, the start of the second file would attend to the end of the first. The label at the boundary, the
# second file's first token, is left out of the loss (it becomes the padding id), as it would be with each piece
# in a row of its own. The tests:
# `test_lm_packing.py::test_a_packed_batch_has_the_loss_and_gradients_of_its_documents_alone` (the loss and every
# gradient of packed rows equal their documents alone) and
# `test_data_packing.py::test_the_loss_of_a_packed_window_is_the_sum_of_its_documents_losses_alone`.

# %%
crossing = next(i for i in range(len(data.train)) if len(set(data.train.documents(i)[:-1].tolist())) > 1)
packed = data.train.make_batch([crossing])
pieces = torch.unique_consecutive(packed.mask.documents[0], return_counts=True)[1].tolist()
ignored = (packed.labels[0] == tokenizer.pad_id).nonzero().flatten().tolist()
print(f"window {crossing}: documents of {pieces} tokens; the label of position {ignored} (the next document's first "
      "token) is left out")
exact = copy.deepcopy(model).double()
with torch.no_grad():
    together = exact(packed.tokens, packed.mask)
    apart = torch.cat([exact(piece) for piece in packed.tokens.split(pieces, dim=1)], dim=1)
    leaky = exact(packed.tokens)
print(f"packed row against its documents run alone: largest difference {(together - apart).abs().max().item():.1e}")
print(f"the row without its documents (attending across the boundary): {(leaky - apart).abs().max().item():.2f}")

# %% [markdown]
# ## Training
#
# Before training, the model's held-out loss is close to that of a uniform guess over the 1,000 tokens, ln(1000)
# = 6.91 nats per token. The trainer keeps the training loss of every step and the held-out loss every 25 steps.

# %%
print(f"held-out loss before training: {trainer.evaluate():.3f} nats/token")
start = time.perf_counter()
trainer.train()
seconds = time.perf_counter() - start
passes = trainer.tokens / (len(data.train) * data.train.block)
print(f"trained {trainer.step} steps, {trainer.tokens:,} tokens ({passes:.1f} passes over the text), in {seconds:.0f} s "
      f"({trainer.tokens / seconds:,.0f} tokens/s)")

# %% [markdown]
# `lm_results` scores the model on the held-out module, next to the baseline a language model must beat: a unigram
# model (each token's frequency in the training labels, add-one smoothed), scored on the same held-out tokens with
# the same tokenizer. Perplexity is exp(loss): as unsure as a uniform choice among that many tokens.

# %%
results = lm_results(trainer, data, seconds)
table(["", "held-out loss (nats/token)", "perplexity"],
      [("uniform guess", f"{math.log(config.vocab):.3f}", f"{config.vocab:,}"),
       ("unigram baseline", f"{results['unigram_loss']:.3f}", f"{results['unigram_perplexity']:.1f}"),
       ("**the model**", f"**{results['eval_loss']:.3f}**", f"**{results['perplexity']:.1f}**")])

fig, ax = plt.subplots(figsize=(8.5, 3.2))
ax.plot(*zip(*trainer.history.train_loss), label="train (each step)", alpha=0.6)
ax.plot(*zip(*trainer.history.eval_loss), marker="o", label="held out (textwrap.py)")
ax.axhline(results["unigram_loss"], color="grey", linestyle="--", label="unigram baseline, held out")
ax.set(xlabel="step (2,048 tokens each)", ylabel="loss (nats/token)", title="A small LM on standard-library source")
ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# The training loss is measured on text the model has already seen (the run makes a few passes over it), the
# held-out loss on a module it has never seen: that one measures what it has learned about Python, and it is the one
# to compare with the unigram baseline.

# %% [markdown]
# ## Generation
#
# `generate(model, prompt, max_new_tokens, ...)` continues a batch of prompts (token ids) with the model's
# key/value cache: the prompt runs once, then one position per step. Greedy by default: the most probable token
# each time. With `end_symbol`, a row ends at `</s>` (the end of a file) and is padded after it. See
# [Incremental decoding and generation](../docs/lm.md#incremental-decoding-and-generation).

# %%
model.eval()
prompt = torch.tensor([tokenizer.encode("    def")])
greedy = generate(model, prompt, 60, end_symbol=tokenizer.eos_id)
print("prompt", tuple(prompt.shape), "->", tuple(greedy.shape), "as promised:", inspect.signature(generate).return_annotation)
print(tokenizer.decode(greedy[0].tolist()))

# %% [markdown]
# Greedy decoding is one path, and it tends to repeat itself. Sampling draws each token from the model's
# distribution instead, sharpened by a `temperature` below 1, and cut to the `top_k` most probable tokens or to the
# smallest set holding `top_p` of the probability (the nucleus), which keeps the long tail of unlikely tokens out.
# One `seed` makes the whole call reproducible; the rows of a batch draw their own tokens. Three rows of the same
# prompt, in one call:

# %%
rows = generate(model, prompt.repeat(3, 1), 60, sample=True, temperature=0.7, top_p=0.9, seed=0,
                end_symbol=tokenizer.eos_id)
for i, row in enumerate(rows):
    print(f"--- row {i} (temperature 0.7, top_p 0.9, seed 0)")
    print(tokenizer.decode(row.tolist()))

# %% [markdown]
# After well under a minute of training, the model writes the shape of this code (indented `def` lines taking
# `self`, `return` statements, docstrings), not working code. The same seed gives the same tokens, and `top_k=1`
# keeps only the most probable token: greedy decoding.

# %%
again = generate(model, prompt.repeat(3, 1), 60, sample=True, temperature=0.7, top_p=0.9, seed=0,
                 end_symbol=tokenizer.eos_id)
print("the same seed gives the same tokens:", torch.equal(again, rows))
print("sampling with top_k=1 is greedy:",
      torch.equal(generate(model, prompt, 60, sample=True, top_k=1, seed=1, end_symbol=tokenizer.eos_id), greedy))
print("--- another prompt, top_k 20 at temperature 1.0, seed 1")
print(tokenizer.decode(generate(model, torch.tensor([tokenizer.encode("class")]), 60, sample=True, top_k=20, seed=1,
                                end_symbol=tokenizer.eos_id)[0].tolist()))

# %% [markdown]
# The cache changes the cost, not the result: without it every step runs the whole prefix again, with it only the
# newest position. The tokens are the same
# (`test_lm_generate.py::test_cached_generation_equals_full_recompute_token_for_token` checks it on both
# formulations, greedy and sampled). A request longer than the positions the model has (`max_len`) is refused
# before any work, saying what to ask for instead.

# %%
timings = {}
for use_cache in (True, False):
    start = time.perf_counter()
    out = generate(model, prompt, 250, use_cache=use_cache)
    timings[use_cache] = (time.perf_counter() - start, out)
print(f"250 tokens: {timings[True][0]:.2f} s with the cache, {timings[False][0]:.2f} s without; "
      f"same tokens: {torch.equal(timings[True][1], timings[False][1])}")
try:
    generate(model, prompt, 300)
except ValueError as error:
    print(error)

# %% [markdown]
# ## What the heads look at
#
# Setting `record_attention = True` on the attention modules keeps their last attention probabilities in `.attn`
# (batch, heads, queries, keys), computed by the eager reference. Here the four heads of the second layer on a
# line of code: each row is a query position, and the causal mask leaves the upper triangle empty.

# %%
snippet = "    def __init__(self, width=70):\n        self.width = width\n"
ids = torch.tensor([tokenizer.encode(snippet)])
pieces = [tokenizer.decode([i]).replace("\n", "\\n").replace(" ", "·") for i in ids[0].tolist()]
for layer in model.layers:
    layer.self_attn.record_attention = True
with torch.no_grad():
    model(ids)
attn = model.layers[1].self_attn.attn[0]
for layer in model.layers:
    layer.self_attn.record_attention = False

fig, axes = plt.subplots(1, 4, figsize=(13, 3.9))
for head, ax in enumerate(axes):
    ax.imshow(attn[head], cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(pieces)), pieces, rotation=90, fontsize=7)
    ax.set_yticks(range(len(pieces)), pieces if head == 0 else [], fontsize=7)
    ax.set_title(f"layer 2, head {head}", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The same from the command line
#
# `typed-transformer train lm` runs these steps on any UTF-8 files: it trains the tokenizer, tokenizes into a
# store kept beside the checkpoint, trains with `make_lm_trainer`, reports the held-out perplexity next to the
# unigram baseline's, and saves a checkpoint with the tokenizer inside, so that `generate` takes plain text.
# This notebook's run, with its sizes as flags: the same tokenizer, batches and weights, so the same held-out loss
# and the same greedy continuation (a sampled row also depends on how many rows are drawn together, and `generate`
# on the command line draws one prompt at a time):
#
# ```bash
# stdlib="$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')"
# typed-transformer train lm --out runs/stdlib-small \
#     --text $stdlib/{argparse,bisect,contextlib,dataclasses,difflib,enum,fractions,functools,heapq,queue,random,shutil,statistics,threading,tokenize}.py \
#     --valid $stdlib/textwrap.py --vocab-size 1000 --d-model 96 --layers 2 --heads 4 --d-ff 384 --dropout 0 \
#     --steps 350 --warmup 100 --eval-every 25
# typed-transformer generate --checkpoint runs/stdlib-small --max-new-tokens 60 "    def"
# typed-transformer generate --checkpoint runs/stdlib-small --max-new-tokens 60 --sample --temperature 0.7 --top-p 0.9 --seed 0 "    def"
# ```
#
# Without the size flags, `train lm` trains the default model (2 layers, d_model 128, 2,000 tokens, 900 steps) of
# the [recorded run on the whole standard library](../docs/data.md#a-language-model-of-the-python-standard-library-on-a-cpu).
# Further: the functional transformer's formulation (`LMConfig.functional`, `--formulation functional`) in
# [Two formulations, one model](../docs/lm.md#two-formulations-one-model), beam search (`beam_generate`,
# `--beam-size`) and stop sequences (`--stop`) in [Language model](../docs/lm.md), training on several processes
# in [Distributed training](../docs/distributed.md).
