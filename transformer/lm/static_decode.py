"""A decode step over a static key/value cache, compiled once per batch size (Pope et al. 2022, "Efficiently Scaling
Transformer Inference", section 2: one token per step reads every weight once; here the step also writes its key
and value in place, so nothing is allocated or copied per token).

:class:`StaticSteps` is a step function (:class:`transformer.decoding.StepFunction`) for :func:`generate`'s search:

* the first call (the prompt) runs the model eagerly into an ordinary :class:`~transformer.lm.positions.LMCache`,
  with the contracts checked as the policy says; its keys and values are then copied once into preallocated
  buffers of the request's whole length (prompt + new tokens), with which keys are real (a left-padded prompt's
  pads are not) and each row's next position;
* every later call runs one position through :func:`decode_step`: the token's key and value written into the
  buffers at ``slot`` (``index_copy_``, the slot a 0-dim tensor), attention over the whole buffer with a dense mask
  (real keys, ``j <= slot``, and each layer's sliding window ``slot - j < W``), the logits of the new position.
  Its inputs are tensors whose shapes do not change from token to token, so ``torch.compile`` traces it once per
  batch size and shape of request (:func:`compiled_decode_step`), never once per token.

Dynamo keeps at most ``torch._dynamo.config.recompile_limit`` graphs (8 by default) of the step per process: past
them a request decodes with the same step uncompiled, after a warning that says so.

Greedy decoding takes the argmax of the logits (no log-softmax: the same token unless two logits round to one
log-probability); sampling gets :meth:`Generator.decision_log_probs`, as the eager step gives it. The tokens equal
the eager step's (``tests/test_lm_compiled_generation.py``), up to float rounding in the attention's sums (the
masked keys add exact zeros).

What the step cannot take falls back to the eager step (:func:`static_decode_refusal` names the reason): a model that
is not a :class:`~transformer.lm.model.TransformerLM` with a config, a model in training mode (dropout), a mixture
of experts (its dispatch sorts tokens by expert: data-dependent shapes), attention recording the probabilities,
generation without a cache, and beam search (which reorders the cache at every step; :func:`generate` keeps it eager).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ..cache import KVCache
from ..contracts import Float, Int, Tensor, checked
from ..contracts import checks as checks_switch
from ..decoding.steps import validate_step_checks
from ..model import decision_log_probs
from .positions import LMCache

__all__ = [
    "StaticKVCache",
    "StaticSteps",
    "decode_step",
    "static_decode_refusal",
    "compiled_decode_step",
    "room_for",
]


class StaticKVCache(KVCache):
    """One layer's keys and values in buffers of a request's whole length, (batch, kv_heads, room, d_k) each,
    written in place at the shared 0-dim ``slot`` tensor (:meth:`extend` returns the whole buffers: the mask says
    which positions are held)."""

    def __init__(self, keys: Tensor, values: Tensor, slot: Tensor) -> None:
        super().__init__()
        self._keys, self._values, self.slot = keys, values, slot
        self._length = keys.size(2)

    @checked
    def extend(
        self, k: Float[Tensor, "batch heads 1 d_k"], v: Float[Tensor, "batch heads 1 d_k"]
    ) -> tuple[Float[Tensor, "batch heads room d_k"], Float[Tensor, "batch heads room d_k"]]:
        """Write the new position's key and value at ``slot``; every buffer position (the mask hides the unwritten)."""
        self._keys.index_copy_(2, self.slot.view(1), k)
        self._values.index_copy_(2, self.slot.view(1), v)
        return self._keys, self._values


@checked
def decode_step(
    model: nn.Module,
    tokens: Int[Tensor, "batch 1"],
    positions: Int[Tensor, "batch 1"],
    slot: Int[Tensor, ""],
    real_keys: Tensor,
    caches: list,
    greedy: bool,
) -> Float[Tensor, "batch vocab"]:
    """One position through ``model`` (a :class:`~transformer.lm.model.TransformerLM`) over the static ``caches``
    (one :class:`StaticKVCache` per layer, sharing ``slot``): the next token's logits (``greedy``) or its
    log-probabilities. ``real_keys`` (batch, room) bool: True where a key is a real token (pads: False)."""
    room = real_keys.size(1)  # positions lie below the room: RoPE's table needs no more rows
    keys = torch.arange(room, device=tokens.device)
    held = real_keys & (keys <= slot)
    masks = {}
    for window in dict.fromkeys(model.layer_windows):
        masks[window] = (held if window is None else held & (slot - keys < window)).unsqueeze(1)
    rotation = local = None
    if model.rotary is not None:
        dtype = model.weights_dtype()
        if model.config.float32_gain_and_rotation:
            dtype = torch.promote_types(dtype, torch.float32)
        rotation = model.rotary(positions, dtype, room)
        if model.local_rotary is not None:
            local = model.local_rotary(positions, dtype, room)
    x = model.embed(tokens, offset=0, positions=positions)
    for i, layer in enumerate(model.layers):
        window = model.layer_windows[i]
        turn = local if local is not None and window is not None else rotation
        if model.rope_layers is not None and not model.rope_layers[i]:
            turn = None
        x = layer(x, masks[window], caches[i], turn)
    last = model.norm(x)[:, -1]
    return model.generator.proj(last) if greedy else decision_log_probs(model.generator, last)


def static_decode_refusal(model: nn.Module, use_cache: bool = True) -> str | None:
    """Why :class:`StaticSteps` cannot run ``model`` (a phrase), or None when it can."""
    from .model import TransformerLM

    if not isinstance(model, TransformerLM) or model.config is None:
        return f"the model is a {type(model).__name__}, not a TransformerLM built from an LMConfig"
    if not use_cache:
        return "use_cache=False (the static step is a cache)"
    if model.training:
        return "the model is in training mode (dropout); call model.eval()"
    if model.config.n_experts:
        return "a mixture of experts (its dispatch has data-dependent shapes)"
    if any(getattr(layer.self_attn, "record_attention", False) for layer in model.layers):
        return "an attention records its probabilities (record_attention)"
    return None


def _recompile_limit_error() -> type[Exception]:
    """What Dynamo raises under ``fullgraph=True`` once a function has as many graphs as its recompile limit allows
    (imported when a compiled step fails: importing the package imports no compiler, docs/install.md)."""
    import torch._dynamo.exc as dynamo_errors

    return getattr(dynamo_errors, "FailOnRecompileLimitHit", None) or dynamo_errors.FailOnCacheLimitHit


#: The shortest room of the buffers: requests up to this many positions share one graph per batch size.
MIN_ROOM = 256


def room_for(length: int, max_len: int) -> int:
    """The buffers' positions for a request of ``length`` (prompt + new tokens): the next power of two, at least
    :data:`MIN_ROOM`, at most ``max_len`` (so requests of similar lengths share a compiled graph)."""
    return min(max_len, max(MIN_ROOM, 1 << max(length - 1, 0).bit_length()))


_COMPILED: dict[str, object] = {}


def compiled_decode_step(backend: str = "inductor"):
    """:func:`decode_step` under ``torch.compile(fullgraph=True, dynamic=False)`` on ``backend``, made once per
    process (Dynamo keeps one graph per batch size, room and checks setting). Inductor's ``freezing`` (weights as
    constants) is not used: it measured no faster here (docs/benchmarks.md), and a frozen graph would not see a
    changed weight."""
    if backend not in _COMPILED:
        _COMPILED[backend] = torch.compile(decode_step, fullgraph=True, dynamic=False, backend=backend)
    return _COMPILED[backend]


class StaticSteps:
    """The step function of :func:`generate` over a static cache of ``length`` positions (prompt + new tokens):
    see the module docstring. ``step`` is :func:`decode_step` or its compiled form; ``greedy``: the step returns
    logits (argmax-ready), else log-probabilities. No :meth:`reorder` (beam search stays eager)."""

    def __init__(
        self, model: nn.Module, length: int, prompt_mask: Tensor | None, step, greedy: bool, checks: str = "first"
    ) -> None:
        self.model, self.length, self.prompt_mask, self.step, self.greedy = model, length, prompt_mask, step, greedy
        self.checks = validate_step_checks("generate", checks)
        self.caches: list[StaticKVCache] | None = None

    def __call__(self, ys: Tensor) -> Tensor:
        if self.caches is None:
            if self.checks == "never":
                with checks_switch(False):
                    return self._prefill(ys)
            return self._prefill(ys)
        if self.checks == "never":
            with checks_switch(False):
                return self._decode(ys)
        return self._decode(ys)

    def _decode(self, ys: Tensor) -> Tensor:
        if ys.size(1) - 1 != int(self.slot_at):
            raise ValueError(f"StaticSteps: {ys.size(1)} tokens after {int(self.slot_at)} held; one at a time")
        self.slot.fill_(self.slot_at)
        self.tokens.copy_(ys[:, -1:])  # one buffer: the same strides at every step (no recompilation)
        arguments = (self.model, self.tokens, self.positions, self.slot, self.real_keys, self.caches, self.greedy)
        try:
            out = self.step(*arguments)
        except Exception as error:  # too many shapes in this process: the same step, eagerly
            if not isinstance(error, _recompile_limit_error()):
                raise
            warnings.warn(
                "generate(compile=True): torch.compile's recompile limit is reached (torch._dynamo.config."
                "recompile_limit); this request decodes eagerly over the static cache",
                stacklevel=3,
            )
            self.step = decode_step
            out = self.step(*arguments)
        self.positions.add_(1)
        self.slot_at += 1
        return out

    def _prefill(self, ys: Tensor) -> Tensor:
        model, prompt = self.model, ys.size(1)
        cache = LMCache(len(model.layers))  # no window: every prompt position is copied into the buffers
        mask = None
        if self.prompt_mask is not None:
            from ..masks import AttentionMask

            mask = AttentionMask(key_mask=self.prompt_mask)
        hidden = model(ys, mask, cache=cache)[:, -1]
        batch, room = ys.size(0), room_for(self.length, model.max_len)
        self.slot = torch.zeros((), dtype=torch.long, device=ys.device)
        self.slot_at = prompt
        self.tokens = ys.new_zeros(batch, 1)
        self.caches = []
        for layer in cache.layers:
            k, v = layer.keys, layer.values
            keys = k.new_zeros(batch, k.size(1), room, k.size(3))  # zeros: a masked key's value times 0 is 0
            values = v.new_zeros(batch, v.size(1), room, v.size(3))
            keys[:, :, :prompt], values[:, :, :prompt] = k, v
            self.caches.append(StaticKVCache(keys, values, self.slot))
        self.real_keys = torch.ones(batch, room, dtype=torch.bool, device=ys.device)
        if cache.real_keys is not None:
            self.real_keys[:, :prompt] = cache.real_keys
        following = cache.next_positions
        if following is None:
            following = torch.full((batch,), prompt, dtype=torch.long, device=ys.device)
        self.positions = following.to(torch.long).clone().view(batch, 1)
        for rotary in (model.rotary, model.local_rotary):  # the table now: the compiled step never builds one
            if rotary is not None:
                rotary.tables(room)
        logits = model.generator.proj(hidden)
        return logits if self.greedy else decision_log_probs(model.generator, hidden)

    def reorder(self, index: Tensor) -> None:
        raise ValueError("StaticSteps: beam search reorders the cache; generate runs it on the eager step")
