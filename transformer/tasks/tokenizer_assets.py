"""A tokenizer inside a checkpoint: saved with the model, found again, and refused when it does not belong.

The tokenizer is two checkpoint assets (covered by the SHA-256 manifest): ``tokenizer.json``, the ``tokenizers``
library's file alone (``tokenizers.Tokenizer.from_file`` and transformers read it), and ``tokenizer_extra.json``,
our fields (its kind, a pretrained tokenizer's special ids); beside them ``tokenizer_config.json``
(:func:`tokenizer_config`: the special tokens, ``tokenizer_class`` ``PreTrainedTokenizerFast``), so that
transformers' ``PreTrainedTokenizerFast.from_pretrained`` reads the checkpoint directory itself, special tokens
included (``AutoTokenizer`` reads the directory's ``config.json`` first, which is ours, not transformers': the folder
``typed-transformer export`` writes is the one for it). A checkpoint of before
2026-12-02 holds one ``tokenizer.json`` with our fields inside, still read. The checkpoint's metadata records the
tokenizer's kind, vocabulary size and fingerprint (``tokenizer_metadata``). :func:`tokenizer_from_checkpoint` reads
it back and raises :class:`~transformer.data.tokenizers.TokenizerMismatchError` when its vocabulary is not the
model's or its fingerprint not the recorded one; :func:`check_same_tokenizer` refuses a resume whose tokenizer is
another than the checkpoint's.
"""

from __future__ import annotations

import json
from typing import Any

from torch import nn

from ..checkpoint import Checkpoint
from ..data.tokenizers import (
    TOKENIZER_EXTRA_FILE,
    TOKENIZER_FILE,
    PretrainedTextTokenizer,
    TextTokenizer,
    TokenizerMismatchError,
    tokenizer_from_texts,
)

__all__ = [
    "tokenizer_config",
    "TOKENIZER_CONFIG_FILE",
    "attach_tokenizer",
    "tokenizer_metadata",
    "tokenizer_from_checkpoint",
    "check_same_tokenizer",
    "model_vocab",
]


#: transformers' settings of a tokenizer: its class, special tokens and longest input.
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def tokenizer_config(tokenizer: TextTokenizer, max_len: int) -> str:
    """``tokenizer_config.json`` for ``tokenizer`` and a model of context ``max_len``: ``tokenizer_class``
    ``PreTrainedTokenizerFast`` (transformers then reads ``tokenizer.json`` as it is, adding only what its
    post-processor adds, as ours encodes), the bos, eos (the first end id), pad and unk tokens, ``model_max_length``."""
    ids = {"bos_token": tokenizer.bos_id, "eos_token": tokenizer.eos_id, "pad_token": tokenizer.pad_id}
    ids["unk_token"] = tokenizer.unk_id
    tokens = {field: tokenizer.tokenizer.id_to_token(i) for field, i in ids.items() if i is not None}
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        **{field: token for field, token in tokens.items() if token is not None},
    }
    return json.dumps(settings, indent=2, sort_keys=True) + "\n"


def fits_vocab(tokenizer: TextTokenizer, vocab: int) -> bool:
    """Whether ``tokenizer`` belongs with a model of ``vocab`` tokens: the same size, or, for a pretrained model's
    own tokenizer, at most as many (a pretrained embedding often has spare rows: Qwen's 151936 for 151665 tokens)."""
    if tokenizer.kind == PretrainedTextTokenizer.KIND:
        return tokenizer.vocab_size <= vocab
    return tokenizer.vocab_size == vocab


def model_vocab(config: Any) -> int:
    """The vocabulary a tokenizer must fill: an LMConfig's ``vocab``, an encoder-decoder's (shared) ``tgt_vocab``."""
    return config.vocab if hasattr(config, "vocab") else config.tgt_vocab


def tokenizer_metadata(tokenizer: TextTokenizer) -> dict[str, Any]:
    return {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size, "sha256": tokenizer.fingerprint}


def attach_tokenizer(model: nn.Module, tokenizer: TextTokenizer) -> None:
    """Make every checkpoint of ``model`` carry ``tokenizer`` (its :meth:`~TextTokenizer.files` in
    ``model.checkpoint_assets``, read by :func:`~transformer.checkpoint.save_checkpoint`; other assets kept)."""
    vocab = model_vocab(model.config)
    if not fits_vocab(tokenizer, vocab):
        raise TokenizerMismatchError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is {vocab}"
        )
    files = {**tokenizer.files(), TOKENIZER_CONFIG_FILE: tokenizer_config(tokenizer, model.config.max_len)}
    model.checkpoint_assets = {**getattr(model, "checkpoint_assets", {}), **files}


def tokenizer_from_checkpoint(ckpt: Checkpoint) -> TextTokenizer:
    """The tokenizer saved in ``ckpt``, checked against the model and the recorded fingerprint."""
    with open(ckpt.asset(TOKENIZER_FILE), encoding="utf-8") as f:
        text = f.read()
    extra = None
    if TOKENIZER_EXTRA_FILE in ckpt.assets:  # else a checkpoint of before 2026-12-02: our fields in tokenizer.json
        with open(ckpt.asset(TOKENIZER_EXTRA_FILE), encoding="utf-8") as f:
            extra = f.read()
    tokenizer = tokenizer_from_texts(text, extra, source=f"checkpoint {ckpt.path}: {TOKENIZER_FILE}")
    vocab = model_vocab(ckpt.config)
    if not fits_vocab(tokenizer, vocab):
        raise TokenizerMismatchError(
            f"checkpoint {ckpt.path}: its tokenizer has {tokenizer.vocab_size} tokens but the "
            f"model's vocabulary is {vocab}: they were not trained together"
        )
    recorded = (ckpt.metadata.get("tokenizer") or {}).get("sha256")
    if recorded != tokenizer.fingerprint:
        raise TokenizerMismatchError(
            f"checkpoint {ckpt.path}: its tokenizer (fingerprint {tokenizer.fingerprint[:12]}) "
            f"is not the one the model was trained with (recorded {str(recorded)[:12]})"
        )
    return tokenizer


def check_same_tokenizer(
    checkpoint_tokenizer: TextTokenizer, given: TextTokenizer, where: str, given_name: str
) -> None:
    """Refuse to go on with ``given`` where ``checkpoint_tokenizer`` was used (a resume, a data cache)."""
    if checkpoint_tokenizer.fingerprint != given.fingerprint:
        raise TokenizerMismatchError(
            f"{where} was trained with another tokenizer (fingerprint {checkpoint_tokenizer.fingerprint[:12]}, "
            f"{checkpoint_tokenizer.kind}, {checkpoint_tokenizer.vocab_size} tokens) than {given_name} "
            f"(fingerprint {given.fingerprint[:12]}, {given.kind}, {given.vocab_size} tokens)"
        )
