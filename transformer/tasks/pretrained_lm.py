"""Continuing a pretrained model on your own text (``typed-transformer train lm --init DIR``): the model and the
tokenizer of a Hugging Face checkpoint folder (:mod:`transformer.lm.pretrained`), as the ``train lm`` recipe
(:mod:`~transformer.tasks.text_lm`) takes them.

* :func:`pretrained_text_tokenizer`: the folder's ``tokenizer.json`` as a
  :class:`~transformer.data.tokenizers.PretrainedTextTokenizer` (its end-of-sequence ids separate documents in the
  training stream and end generation), saved in every checkpoint like a trained tokenizer.
* :func:`check_block_fits`: windows longer than the folder's context (:func:`pretrained_context`, read from
  ``config.json`` alone) are refused before anything is loaded or tokenized.
* :func:`load_pretrained_lm`: the folder's model in float32 (training in the checkpoint's bfloat16 loses the
  small updates) unless another dtype is asked (``--dtype``), refused when its context is shorter than the training
  windows.
* :data:`FINE_TUNE_PEAK_LR`: the default peak learning rate of a continued model (the Noam default's 2e-3 for a
  model of width 1024 would wreck pretrained weights in a few steps).

The loss of a continued model is :func:`fine_tune_criterion`: the summed cross-entropy of every label. The windows
of a text are never padded, and a pretrained model's padding id is often a real token (Qwen's is its end of text),
so no token id is left out of the loss; packed windows mark the labels that begin a document with
:data:`IGNORED_LABEL` (-100, no token's id), which it leaves out.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..data.tokenizers import PretrainedTextTokenizer
from ..lm.model import TransformerLM
from ..lm.moe.aux_loss import WithLoadBalancing
from ..lm.pretrained import PretrainedFormatError, PretrainedTokenizer, load_pretrained
from ..lm.pretrained.config_fields import ConfigFields
from ..lm.pretrained.files import CONFIG_FILE, read_json
from ..lm.pretrained.supported import architecture_of
from .hf_export import origin_assets

__all__ = [
    "pretrained_text_tokenizer",
    "load_pretrained_lm",
    "pretrained_context",
    "check_block_fits",
    "fine_tune_criterion",
    "FINE_TUNE_PEAK_LR",
    "IGNORED_LABEL",
]

#: The label of a packed window that the continued model's loss leaves out (a document's first token).
IGNORED_LABEL = -100

#: The peak learning rate ``train lm --init`` uses unless ``--lr`` or ``--lr-factor`` is given.
FINE_TUNE_PEAK_LR = 5e-5


def pretrained_text_tokenizer(folder: str | Path) -> PretrainedTextTokenizer:
    """The tokenizer of the checkpoint folder ``folder``; its end-of-sequence ids are ``generation_config.json``'s
    (else ``config.json``'s, else ``tokenizer_config.json``'s ``eos_token``): a folder with none is refused, as the
    documents of a text could not be told apart."""
    pretrained = PretrainedTokenizer.from_folder(folder)
    special = {field: token_id for field, (_, token_id) in pretrained.special_tokens.items()}
    eos_ids = list(pretrained.eos_ids) or ([special["eos_token"]] if "eos_token" in special else [])
    if not eos_ids:
        raise PretrainedFormatError(
            f"{Path(folder)}: no eos_token_id (in generation_config.json, or in config.json where there is no "
            "generation_config.json) and no eos_token in tokenizer_config.json: training on text needs the token "
            "that ends a document"
        )
    return PretrainedTextTokenizer(
        pretrained.tokenizer,
        eos_ids=eos_ids,
        pad_id=pretrained.pad_id,
        bos_id=special.get("bos_token"),
        unk_id=special.get("unk_token"),
    )


def pretrained_context(folder: str | Path) -> int:
    """The longest sequence the model of ``folder`` takes (its ``max_len``: ``config.json``'s
    ``max_position_embeddings``, or ``n_positions``), read from ``config.json`` alone: no weight is loaded."""
    path = Path(folder)
    if not path.is_dir():
        raise PretrainedFormatError(f"{path}: not a directory (--init reads a checkpoint folder)")
    fields = ConfigFields(read_json(path / CONFIG_FILE), path / CONFIG_FILE)
    return architecture_of(fields).lm_config(fields).max_len


def check_block_fits(folder: str | Path, block: int) -> None:
    """Refuse (ValueError) windows of ``block`` tokens longer than the context of the model of ``folder``, before
    anything is loaded or tokenized."""
    context = pretrained_context(folder)
    if block > context:
        raise ValueError(
            f"--block-len {block} is longer than the pretrained model's context, max_len={context} "
            f"({Path(folder) / CONFIG_FILE}): give --block-len {context} or less"
        )


def load_pretrained_lm(
    folder: str | Path, device: str | torch.device, block: int, dtype: torch.dtype | str | None = torch.float32
) -> TransformerLM:
    """The model of ``folder`` in ``dtype`` (float32 unless asked: a name or ``"auto"`` as
    :func:`~transformer.lm.pretrained.load_pretrained` takes it) on ``device``, whose context holds windows of
    ``block`` tokens."""
    model = load_pretrained(folder, dtype=dtype, device=device)
    model.checkpoint_assets = origin_assets(folder, model)  # every checkpoint records the folder (export)
    if block > model.config.max_len:
        raise ValueError(
            f"--block-len {block} is longer than the pretrained model's context, max_len={model.config.max_len} "
            f"({Path(folder) / 'config.json'}): give --block-len {model.config.max_len} or less"
        )
    return model


def fine_tune_criterion(model: TransformerLM | None = None) -> nn.Module:
    """The summed cross-entropy of every label but :data:`IGNORED_LABEL` (the model's generator gives
    log-probabilities); for a mixture of experts (``model.config.n_experts``) plus its load-balancing loss weighted
    by ``router_aux_loss_coef`` while training (:class:`~transformer.lm.moe.aux_loss.WithLoadBalancing`)."""
    criterion = nn.NLLLoss(reduction="sum", ignore_index=IGNORED_LABEL)
    if model is not None and getattr(model.config, "n_experts", None) is not None:
        return WithLoadBalancing(criterion, model)
    return criterion
