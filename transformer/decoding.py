"""Decoding: greedy (exact length), incremental decoding with a key/value cache, beam search.

Every decoder here grows a target ``ys`` one token per step, starting from ``start_symbol``.
That is a contract: :func:`greedy_step` takes ``ys`` of shape (batch, steps) and returns (batch, steps+1),
checked by jaxtyping (``"batch steps+1"``) while checks are on and by an explicit ValueError always.
The result of :func:`greedy_decode` and :func:`beam_search` has exactly ``max_len`` columns
(start symbol included, as in the Annotated Transformer): with an ``end_symbol``, positions after
a row's end symbol are filled with ``pad_symbol``, never cut.

Incremental decoding (``use_cache=True``, the default) keeps, for every decoder layer, the
self-attention keys and values of the positions already decoded and the encoder memory projected
once by the cross-attention's ``k_proj``/``v_proj`` (:class:`DecoderCache`), so each step runs the
decoder on one new position. Its tokens equal the full-recompute path's (``use_cache=False``,
which re-decodes the whole prefix each step, as the tutorial does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .contracts import Bool, Float, Int, Tensor, checked
from .embeddings import LearnedPositionalEncoding, PositionalEncoding
from .masks import subsequent_mask

__all__ = ["DecoderCache", "greedy_decode", "greedy_step", "next_token_log_probs", "beam_search", "BeamResult"]


def _model_max_len(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "max_len", None)


def _validate_max_len(model: nn.Module, max_len: object) -> int:
    if isinstance(max_len, bool) or not isinstance(max_len, int):
        raise ValueError(f"max_len must be a positive int, got {max_len!r} ({type(max_len).__name__})")
    if max_len < 1:
        raise ValueError(f"max_len must be positive (it counts the start symbol), got max_len={max_len}")
    limit = _model_max_len(model)
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len} exceeds the model's max_len={limit} (positions it can encode)")
    return max_len


def _validate_symbol(model: nn.Module, name: str, value: int | None) -> None:
    if value is None:
        return
    vocab = getattr(getattr(model, "config", None), "tgt_vocab", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (vocab is not None and value >= vocab):
        raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab}) (the target vocabulary)")


def _pad_symbol(model: nn.Module, pad_symbol: int | None, end_symbol: int | None) -> int:
    """The filler after a row's end symbol: ``pad_symbol``, else the config's pad id, else the end symbol, else 0."""
    if pad_symbol is None:
        pad_symbol = getattr(getattr(model, "config", None), "pad_id", None)
        if pad_symbol is None:
            pad_symbol = end_symbol if end_symbol is not None else 0
    _validate_symbol(model, "pad_symbol", pad_symbol)
    return pad_symbol


class DecoderCache:
    """Per-layer key/value cache for incremental decoding of one batch of sources.

    ``self_k[i]``/``self_v[i]``: (batch, heads, t, d_k) keys and values of the ``t`` target
    positions decoded so far by layer ``i``'s self-attention; ``memory_k[i]``/``memory_v[i]``:
    (batch, heads, src_len, d_k), the encoder memory projected once by layer ``i``'s
    cross-attention. ``length`` is ``t``.
    """

    def __init__(self, model: nn.Module, memory: Tensor, src_mask: Tensor | None) -> None:
        layers = model.decoder.layers
        self.self_k: list[Tensor | None] = [None] * len(layers)
        self.self_v: list[Tensor | None] = [None] * len(layers)
        self.memory_k = [layer.src_attn.split_heads(layer.src_attn.k_proj(memory)) for layer in layers]
        self.memory_v = [layer.src_attn.split_heads(layer.src_attn.v_proj(memory)) for layer in layers]
        self.src_mask = src_mask
        self.length = 0
        self.batch = memory.size(0)

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (beam search: follow the surviving hypotheses; may repeat rows)."""
        pick = lambda t: None if t is None else t.index_select(0, index)  # noqa: E731
        self.self_k = [pick(t) for t in self.self_k]
        self.self_v = [pick(t) for t in self.self_v]
        self.memory_k = [pick(t) for t in self.memory_k]
        self.memory_v = [pick(t) for t in self.memory_v]
        if self.src_mask is not None and self.src_mask.size(0) != 1:
            self.src_mask = self.src_mask.index_select(0, index)
        self.batch = index.numel()


def _embed_last(model: nn.Module, ys: Tensor) -> Tensor:
    """Target embedding (with positional encoding) of the last position of ``ys`` only: (batch, 1, d_model)."""
    embed = model.tgt_embed
    pos = ys.size(1) - 1
    if isinstance(embed, nn.Sequential) and len(embed) == 2 and isinstance(embed[1], (PositionalEncoding, LearnedPositionalEncoding)):
        return embed[1](embed[0](ys[:, pos:]), offset=pos)
    return embed(ys)[:, pos:]  # unknown embedding module: embed the prefix, keep the last position


def _layer_step(layer: nn.Module, i: int, x: Tensor, cache: DecoderCache) -> Tensor:
    def self_attn(y: Tensor) -> Tensor:
        a = layer.self_attn
        q, k, v = a.split_heads(a.q_proj(y)), a.split_heads(a.k_proj(y)), a.split_heads(a.v_proj(y))
        if cache.self_k[i] is not None:
            k = torch.cat([cache.self_k[i], k], dim=2)
            v = torch.cat([cache.self_v[i], v], dim=2)
        cache.self_k[i], cache.self_v[i] = k, v
        return a.attend(q, k, v, None)  # the newest position may attend to every cached one

    def src_attn(y: Tensor) -> Tensor:
        a = layer.src_attn
        return a.attend(a.split_heads(a.q_proj(y)), cache.memory_k[i], cache.memory_v[i], cache.src_mask)

    x = layer.sublayer[0](x, self_attn)
    x = layer.sublayer[1](x, src_attn)
    return layer.sublayer[2](x, layer.feed_forward)


@checked
def next_token_log_probs(
    model: nn.Module,
    memory: Float[Tensor, "batch src_len d_model"],
    src_mask: Bool[Tensor, "batch 1 src_len"] | None,
    ys: Int[Tensor, "batch steps"],
    cache: DecoderCache | None = None,
) -> Float[Tensor, "batch vocab"]:
    """Log-probabilities of the token after ``ys`` (the generator applied to the last position).

    Without a cache the whole prefix is decoded again under a causal mask. With a cache that
    holds ``t - 1`` positions, only the last token is run through the decoder and the cache grows
    by one position.
    """
    if cache is None:
        out = model.decode(memory, src_mask, ys, subsequent_mask(ys.size(1), device=ys.device))
        return model.generator(out[:, -1])
    if cache.length != ys.size(1) - 1:
        raise ValueError(f"DecoderCache holds {cache.length} positions but ys has {ys.size(1)}; expected {ys.size(1) - 1}")
    x = _embed_last(model, ys)
    for i, layer in enumerate(model.decoder.layers):
        x = _layer_step(layer, i, x, cache)
    cache.length += 1
    return model.generator(model.decoder.norm(x)[:, -1])


@checked
def greedy_step(
    model: nn.Module,
    memory: Float[Tensor, "batch src_len d_model"],
    src_mask: Bool[Tensor, "batch 1 src_len"] | None,
    ys: Int[Tensor, "batch steps"],
    cache: DecoderCache | None = None,
) -> Int[Tensor, "batch steps+1"]:
    """One greedy decoding step: ``ys`` (batch, steps) -> (batch, steps+1), the most probable next token appended."""
    next_word = next_token_log_probs(model, memory, src_mask, ys, cache).argmax(dim=-1)
    out = torch.cat([ys, next_word.unsqueeze(1).to(ys.dtype)], dim=1)
    if out.size(1) != ys.size(1) + 1:  # the invariant, also when checks are off
        raise ValueError(f"greedy_step must add exactly one token: {ys.size(1)} -> {out.size(1)}")
    return out


@checked
def greedy_decode(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    *,
    use_cache: bool = True,
) -> Int[Tensor, "batch {max_len}"]:
    """Greedy decoding (the Annotated Transformer's ``greedy_decode``) with an exact-length guarantee.

    Returns (batch, max_len) token ids starting with ``start_symbol``. With ``end_symbol``, every
    position after a row's first end symbol holds ``pad_symbol`` (default: ``model.config.pad_id``,
    or ``end_symbol`` when the config has no pad id), and decoding stops early once every row has
    ended. Runs under ``torch.no_grad``; put the model in eval mode first (dropout).
    """
    _validate_max_len(model, max_len)
    _validate_symbol(model, "start_symbol", start_symbol)
    _validate_symbol(model, "end_symbol", end_symbol)
    pad_symbol = _pad_symbol(model, pad_symbol, end_symbol)
    batch = src.size(0)
    if src_mask is not None and src_mask.size(0) != batch:
        src_mask = src_mask.expand(batch, -1, -1)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = DecoderCache(model, memory, src_mask) if use_cache else None
        ys = torch.full((batch, 1), start_symbol, dtype=src.dtype, device=src.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        while ys.size(1) < max_len:
            if end_symbol is not None and bool(finished.all()):
                rest = torch.full((batch, max_len - ys.size(1)), pad_symbol, dtype=ys.dtype, device=ys.device)
                ys = torch.cat([ys, rest], dim=1)
                break
            ys = greedy_step(model, memory, src_mask, ys, cache)
            if end_symbol is not None:
                ys[:, -1] = torch.where(finished, torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])
                finished |= ys[:, -1] == end_symbol
    if ys.size(1) != max_len:  # the exact-length promise, also when checks are off
        raise ValueError(f"greedy_decode produced {ys.size(1)} tokens instead of max_len={max_len}")
    return ys


@dataclass
class BeamResult:
    """Beam search output: ``tokens`` (batch, max_len) padded after the end symbol; ``scores`` (batch,)
    the length-normalised log-probability of each chosen hypothesis."""

    tokens: Tensor
    scores: Tensor


def _length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016); 1 at alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


@checked
def beam_search(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.0,
    pad_symbol: int | None = None,
    use_cache: bool = True,
) -> BeamResult:
    """Beam search with a GNMT length penalty; ``beam_size=1`` gives exactly ``greedy_decode``'s tokens.

    Each source is searched separately, keeping ``beam_size`` live hypotheses. A hypothesis that
    emits ``end_symbol`` is finished and scored ``log P(Y) / ((5 + |Y|) / 6) ** length_penalty``
    (|Y| counts generated tokens, end symbol included); the search of a source stops when
    ``beam_size`` hypotheses have finished or ``max_len`` tokens are reached, after which live
    hypotheses compete with the same normalisation. Output is (batch, max_len), padded like greedy.
    """
    _validate_max_len(model, max_len)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    _validate_symbol(model, "start_symbol", start_symbol)
    _validate_symbol(model, "end_symbol", end_symbol)
    pad_symbol = _pad_symbol(model, pad_symbol, end_symbol)
    batch = src.size(0)
    if src_mask is not None and src_mask.size(0) != batch:
        src_mask = src_mask.expand(batch, -1, -1)
    out = torch.full((batch, max_len), pad_symbol, dtype=src.dtype, device=src.device)
    scores = torch.zeros(batch, dtype=torch.float32)
    with torch.no_grad():
        memory_all = model.encode(src, src_mask)
        for b in range(batch):
            memory = memory_all[b : b + 1]
            mask = None if src_mask is None else src_mask[b : b + 1]
            cache = DecoderCache(model, memory, mask) if use_cache else None
            ys = torch.full((1, 1), start_symbol, dtype=src.dtype, device=src.device)
            live = torch.zeros(1, dtype=torch.float32, device=src.device)
            finished: list[tuple[float, float, list[int]]] = []  # (normalised score, raw, tokens)
            while ys.size(1) < max_len:
                n = ys.size(0)
                mem = memory.expand(n, -1, -1)
                m = None if mask is None else mask.expand(n, -1, -1)
                logp = next_token_log_probs(model, mem, m, ys, cache).float()
                vocab = logp.size(-1)
                candidates = (live.unsqueeze(1) + logp).view(-1)
                top_scores, top_index = candidates.topk(min(2 * beam_size, candidates.numel()))
                keep_rows, keep_tokens, keep_scores = [], [], []
                for s, index in zip(top_scores.tolist(), top_index.tolist()):
                    row, token = divmod(index, vocab)
                    if end_symbol is not None and token == end_symbol:
                        tokens = ys[row].tolist() + [token]
                        finished.append((s / _length_penalty(len(tokens) - 1, length_penalty), s, tokens))
                    else:
                        keep_rows.append(row)
                        keep_tokens.append(token)
                        keep_scores.append(s)
                    if len(keep_rows) == beam_size:
                        break
                if len(finished) >= beam_size or not keep_rows:
                    break
                rows = torch.tensor(keep_rows, device=src.device)
                ys = torch.cat([ys.index_select(0, rows), torch.tensor(keep_tokens, dtype=ys.dtype, device=ys.device).unsqueeze(1)], dim=1)
                live = torch.tensor(keep_scores, dtype=torch.float32, device=src.device)
                if cache is not None:
                    cache.reorder(rows)
            else:
                for row in range(ys.size(0)):
                    tokens = ys[row].tolist()
                    s = float(live[row])
                    finished.append((s / _length_penalty(len(tokens) - 1, length_penalty), s, tokens))
            best = max(finished, key=lambda item: item[0])
            out[b, : len(best[2])] = torch.tensor(best[2], dtype=out.dtype)
            scores[b] = best[0]
    return BeamResult(tokens=out, scores=scores)
