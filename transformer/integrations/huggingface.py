"""Hugging Face transformers: run a model's attention on typed-transformer's dispatch (our kernel on CUDA).

```python
from transformer.integrations import huggingface

huggingface.register()  # once per process
model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="typed_transformer")
```

:func:`register` adds :func:`attention_forward` to transformers' ``AttentionInterface`` and transformers' own SDPA
mask builder (``masking_utils.sdpa_mask``: a boolean mask, or None where ``is_causal`` says it all) to its
``AttentionMaskInterface``, both under the name ``"typed_transformer"``. Without the mask function a model would
build no attention mask at all for a new name (padding and causality silently lost).

:func:`attention_forward` mirrors transformers' ``sdpa_attention_forward`` (``integrations/sdpa_attention.py``):
the same arguments, the same ``is_causal`` rule (only without a mask and with more than one query), the same
``position_bias`` handling; it returns ``(attn_output (batch, seq, heads, dim), None)``. It also takes what
transformers' SDPA refuses or ignores:

* ``softcap`` (Gemma 2's ``attn_logit_softcapping``): the scores become ``c * tanh(s / c)`` before the mask;
* ``s_aux``, the attention sinks (gpt-oss passes its ``self.sinks``, (heads,): one logit per query head in each
  softmax's denominator), as the drop-in's ``sinks`` on every backend (transformers' SDPA refuses them; its
  flash_attention_2 casts them to the queries' dtype, we pass them as they are: each backend computes as its
  ``sinks`` say, the half-precision ones in float32); a shape other than (heads,) is refused naming ``s_aux``;
* ``sliding_window`` W (Mistral, Gemma 2's sliding layers: key j seen by query i iff ``i - W < j <= i``);
* packed (padding-free) batches: ``cu_seq_lens_q``/``cu_seq_lens_k`` (FlashAttention's varlen arguments, one packed
  row; as transformers' flash_attention_2 honours them) or ``position_ids`` that restart (transformers' rule,
  ``masking_utils.find_packed_sequence_indices``: a document starts where a position is not the previous plus one).

Where the queries cover every key (no cache: training, a prompt), these become an
:class:`~transformer.masks.AttentionMask` (``causal``, ``documents``, ``window_left = W - 1``) together with the
boolean mask transformers built (kept as its ``dense`` part: it holds the padding), so the kernel skips the blocks
wholly outside a document or the window. A padded (not packed) batch whose ``position_ids`` restart at the padding
puts each padding run in a document of its own: the real tokens' outputs are unchanged, a padded query row outputs 0.
With a cache (decoding) transformers' mask already holds the window: it is used as it is. Attention itself is
:func:`transformer.scaled_dot_product_attention`: our kernel where it takes the inputs, torch's function where it
does not, and :func:`transformer.use_backend` chooses as everywhere. Grouped-query models
(Llama's ``num_key_value_groups``) pass ``enable_gqa``: the kernel reads the shared key/value heads in place,
where transformers' SDPA path often repeats them.

Continuous batching (``generate_batch``, a paged cache) is not available: transformers (5.23) accepts only its own
implementations there.

transformers is optional (``pip install "typed-transformer[hf]"``); this module imports it only inside the
functions, and refuses a missing or older one with an ImportError that names the version and the command.
"""

from __future__ import annotations

import logging
from importlib import metadata

import torch
from torch import Tensor, nn

from ..backends.sdpa import scaled_dot_product_attention
from ..masks import AttentionMask

__all__ = ["NAME", "MIN_TRANSFORMERS", "register", "attention_forward"]

NAME = "typed_transformer"
#: The oldest transformers :func:`register` works with: its ``AttentionMaskInterface`` appeared in 4.53. Which models
#: then run on it depends on the version (checked: 4.53.0, 4.56.2, 5.0.0, 5.23.0): Llama from 4.53; GPT-2 from 4.53,
#: but with its own float masks (which the kernel does not take: torch's function runs) before 4.56; BERT from 5.0
#: (before, its attention ignores AttentionInterface and raises KeyError). The ``hf`` extra asks for 5.4, the oldest
#: whose GPT-2 computes as our loaded one (docs/install.md, "Supported versions").
MIN_TRANSFORMERS = "4.53.0"
INSTALL_HINT = 'pip install "typed-transformer[hf]" (or pip install "transformers>=5.4")'
logger = logging.getLogger(__name__)
_warned_output_attentions = False


def _require_transformers() -> None:
    """Raise ImportError naming the required version and the pip command when transformers is missing or older."""
    try:
        found = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"transformer.integrations.huggingface needs transformers>={MIN_TRANSFORMERS}, which is "
            f"not installed; install it with: {INSTALL_HINT}"
        ) from None
    from packaging.version import Version  # a dependency of transformers

    if Version(found) < Version(MIN_TRANSFORMERS):
        raise ImportError(
            f"transformer.integrations.huggingface needs transformers>={MIN_TRANSFORMERS}, found "
            f"{found}; upgrade with: {INSTALL_HINT}"
        )


def register(name: str = NAME) -> str:
    """Make ``attn_implementation=name`` (default ``"typed_transformer"``) available to every transformers model that
    uses the attention interface: registers :func:`attention_forward` and transformers' SDPA mask builder under
    ``name``. Idempotent; returns ``name``."""
    _require_transformers()
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """A transformers attention function (the signature of ``sdpa_attention_forward``): ``query`` (batch, heads,
    q_len, dim), ``key``/``value`` (batch, kv_heads, k_len, dim), ``attention_mask`` from the mask function (boolean,
    True = attend; or a float mask a caller built) or None; returns ((batch, q_len, heads, dim), None)."""
    global _warned_output_attentions
    sinks = attention_sinks(kwargs.get("s_aux"), query)
    if kwargs.get("output_attentions", False) and not _warned_output_attentions:
        _warned_output_attentions = True
        logger.warning(
            "attn_implementation=%r returns no attention weights (output_attentions=True); use 'eager' for them", NAME
        )
    if attention_mask is not None and attention_mask.dim() == 4:  # older models' masks cover a static cache's length
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    q_len = query.shape[2]
    causal_model = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    is_causal = q_len > 1 and attention_mask is None and causal_model
    position_bias = kwargs.get("position_bias")
    if position_bias is not None:  # an additive bias per head, combined with the mask as transformers' SDPA does
        from transformers.integrations.sdpa_attention import create_position_bias_mask

        attention_mask = create_position_bias_mask(position_bias, attention_mask, is_causal, query, key)
        is_causal = False
    grouped = getattr(module, "num_key_value_groups", 1) > 1 or key.shape[1] != query.shape[1]
    structured = structured_mask(query, key, attention_mask, causal_model, kwargs)
    if structured is not None:
        attention_mask, is_causal = structured, False
    out = scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=float(dropout),
        is_causal=is_causal,
        scale=scaling,
        enable_gqa=grouped,
        softcap=kwargs.get("softcap"),
        sinks=sinks,
    )
    return out.transpose(1, 2).contiguous(), None


def attention_sinks(s_aux: Tensor | None, query: Tensor) -> Tensor | None:
    """transformers' ``s_aux`` (gpt-oss's learned ``self.sinks``) as the drop-in's ``sinks``, unchanged (its dtype
    too, so its gradient reaches the parameter): a float tensor of one logit per query head, (heads,) with heads =
    ``query.shape[1]``, on the queries' device; anything else is refused with a ValueError naming ``s_aux``, the
    expected and the actual value. None stays None."""
    if s_aux is None:
        return None
    heads = query.shape[1]
    if not isinstance(s_aux, Tensor):
        raise ValueError(
            f"attn_implementation={NAME!r}: s_aux (attention sinks) must be a tensor of shape ({heads},), one logit "
            f"per query head, got {type(s_aux).__name__}"
        )
    if tuple(s_aux.shape) != (heads,) or not s_aux.is_floating_point():
        raise ValueError(
            f"attn_implementation={NAME!r}: s_aux (attention sinks) must be a float tensor of shape ({heads},), one "
            f"logit per query head of query {tuple(query.shape)}, got shape {tuple(s_aux.shape)} {s_aux.dtype}"
        )
    if s_aux.device != query.device:
        raise ValueError(
            f"attn_implementation={NAME!r}: s_aux (attention sinks) must be on the queries' device {query.device}, "
            f"got {s_aux.device}"
        )
    return s_aux


def structured_mask(
    query: Tensor, key: Tensor, mask: Tensor | None, causal: bool, kwargs: dict
) -> AttentionMask | None:
    """The structure transformers passes beside the mask, as an :class:`AttentionMask`: ``causal``, ``documents``
    (from ``cu_seq_lens_q``/``_k`` or restarting ``position_ids``) and ``window_left = sliding_window - 1``, with a
    boolean ``mask`` (batch, 1, q_len, k_len) as its dense part. None where there is no structure to add or it cannot
    be placed: a cache (q_len != k_len), a float mask, a mask with a heads axis, nothing but causality."""
    batch, q_len, k_len = query.shape[0], query.shape[2], key.shape[2]
    if q_len != k_len or q_len < 2 or (mask is not None and (mask.dtype != torch.bool or mask.shape[1] != 1)):
        return None
    documents = _documents(kwargs, batch, q_len)
    window = kwargs.get("sliding_window")
    window_left = window - 1 if window is not None and window < q_len else None
    if documents is None and window_left is None:
        return None
    dense = None if mask is None else mask[:, 0].expand(-1, q_len, -1)
    return AttentionMask(causal=causal, documents=documents, window_left=window_left, dense=dense)


def _documents(kwargs: dict, batch: int, seq: int) -> Tensor | None:
    """Each position's document id (batch, seq), or None for one document per row: from ``cu_seq_lens_q`` (which must
    equal ``cu_seq_lens_k``; one packed row), else from ``position_ids`` that restart (transformers' rule)."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None or cu_k is not None:
        if cu_q is None or cu_k is None or not torch.equal(cu_q, cu_k):
            raise ValueError(
                f"attn_implementation={NAME!r}: packed self-attention needs cu_seq_lens_q equal to cu_seq_lens_k, got "
                f"cu_seq_lens_q={None if cu_q is None else cu_q.tolist()}, "
                f"cu_seq_lens_k={None if cu_k is None else cu_k.tolist()}"
            )
        if batch != 1:
            raise ValueError(
                f"attn_implementation={NAME!r}: cu_seq_lens_q describes one packed row (batch 1), got batch={batch}"
            )
        return AttentionMask.from_cu_seqlens(cu_q, seq).documents
    positions = kwargs.get("position_ids")
    if positions is None or positions.dim() != 2 or positions.shape[-1] != seq:
        return None
    documents = AttentionMask.from_position_ids(positions.expand(batch, -1)).documents
    return documents if bool(documents[:, -1].any()) else None
