"""TransformerConfig: a frozen, validated description of a model (the proof-carrying config).

An impossible model cannot be described: construction raises ValueError naming the field,
its value and what would be accepted. The config round-trips through a plain dict or JSON.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal, Self, get_args

from .common.arguments import is_int, is_number

__all__ = ["TransformerConfig", "ConfigRecord"]

NormPlacement = Literal["pre", "post"]
PositionalKind = Literal["sinusoidal", "learned"]
Activation = Literal["relu", "gelu"]
TieWeights = Literal["none", "target", "all"]
AttentionBackend = Literal["auto", "eager", "torch", "triton"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "norm_placement": get_args(NormPlacement),
    "positional_encoding": get_args(PositionalKind),
    "activation": get_args(Activation),
    "tie_weights": get_args(TieWeights),
    "attention_backend": get_args(AttentionBackend),
}
#: Fields that choose how the model runs, not what it computes: they are not part of a model's identity, so a
#: checkpoint neither stores nor compares them (train with one backend, resume or decode with another).
RUNTIME_FIELDS: tuple[str, ...] = ("attention_backend",)
_POSITIVE_INTS = (
    "src_vocab",
    "tgt_vocab",
    "n_encoder_layers",
    "n_decoder_layers",
    "d_model",
    "d_ff",
    "n_heads",
    "max_len",
)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def check_kv_heads(
    kv_heads: int | None, heads: int, name: str = "kv_heads", heads_name: str = "h", prefix: str = ""
) -> int:
    """The number of key/value heads of grouped-query attention (None: ``heads``), validated: a positive int that
    divides ``heads``. Errors name both (``name``, ``heads_name``), after ``prefix``."""
    if kv_heads is None:
        return heads
    if not is_int(kv_heads, at_least=1):
        raise ValueError(f"{prefix}{name} must be a positive int or None, got {name}={kv_heads!r}")
    if heads % kv_heads != 0:
        raise ValueError(
            f"{prefix}{name}={kv_heads} does not divide {heads_name}={heads} (each key/value head serves "
            f"{heads_name} / {name} query heads); values that would: {_divisors(heads)}"
        )
    return kv_heads


class ConfigRecord:
    """What every config of the package does besides validating itself: validated copies, JSON, and the
    comparisons checkpoints make (``TransformerConfig``, ``LMConfig``). Subclasses are frozen dataclasses."""

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} field(s): {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        return cls(**data)

    def to_json(self, **dumps_kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **dumps_kwargs)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))

    def differences(self, other: Self, *, architecture_only: bool = False) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ: ``{name: (self_value, other_value)}`` (without ``RUNTIME_FIELDS`` when
        ``architecture_only``: what decides whether two models compute the same function from the same weights)."""
        return {
            f.name: (getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name) and not (architecture_only and f.name in RUNTIME_FIELDS)
        }

    def _check_ints_and_choices(
        self, positive_ints: tuple[str, ...], choices: dict[str, tuple], prefix: str = ""
    ) -> None:
        """Raise ValueError naming the field: a positive-int field that is not a positive int, a field outside its
        choices. ``prefix`` starts each message (e.g. ``"LMConfig: "``)."""
        for name in positive_ints:
            value = getattr(self, name)
            if not is_int(value):
                raise ValueError(f"{prefix}{name} must be an int, got {value!r} ({type(value).__name__})")
            if value <= 0:
                raise ValueError(f"{prefix}{name} must be positive, got {name}={value}")
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{prefix}{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")

    def architecture(self) -> dict[str, Any]:
        """The fields that define the model's function (``to_dict`` without ``RUNTIME_FIELDS``): a checkpoint's
        identity."""
        return {name: value for name, value in self.to_dict().items() if name not in RUNTIME_FIELDS}


@dataclass(frozen=True, kw_only=True)
class TransformerConfig(ConfigRecord):
    """Every hyper-parameter of the encoder-decoder Transformer (paper section 3, Table 3 "base").

    Attributes:
        src_vocab, tgt_vocab: vocabulary sizes of source and target tokens.
        n_encoder_layers, n_decoder_layers: N in the paper (6 each for the base model).
        d_model: width of every residual stream; d_k = d_v = d_model / n_heads.
        d_ff: inner width of the position-wise feed-forward network.
        n_heads: h, the number of attention heads; must divide d_model.
        dropout: P_drop on every sub-layer output, the embeddings and inside the FFN.
        attention_dropout: dropout on the attention probabilities (the Annotated Transformer uses ``dropout``).
        max_len: the longest sequence the positional encoding covers.
        norm_placement: ``"post"`` as in the paper (LayerNorm(x + Sublayer(x))) or ``"pre"``
            as in the Annotated Transformer's code (x + Sublayer(LayerNorm(x))). Both stacks end in a LayerNorm,
            as torch.nn.Transformer's do.
        positional_encoding: ``"sinusoidal"`` (section 3.5) or ``"learned"`` position embeddings.
        activation: ``"relu"`` (the paper) or ``"gelu"`` inside the FFN.
        layer_norm_eps: epsilon added to the (biased) variance inside LayerNorm's square root.
        tie_weights: ``"none"``; ``"target"`` shares the target embedding with the generator;
            ``"all"`` also shares the source embedding (section 3.4; needs equal vocabularies).
        pad_id: the padding token id, used for padding masks; None when there is no padding token.
        attention_backend: the model's default attention backend, ``"auto"``, ``"eager"``, ``"torch"`` or
            ``"triton"`` (see ``transformer.backends``). A run-time choice (``RUNTIME_FIELDS``), not architecture:
            ``use_backend`` overrides it, and checkpoints neither store nor compare it.
    """

    src_vocab: int
    tgt_vocab: int
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    dropout: float = 0.1
    attention_dropout: float = 0.1
    max_len: int = 5000
    norm_placement: NormPlacement = "pre"
    positional_encoding: PositionalKind = "sinusoidal"
    activation: Activation = "relu"
    layer_norm_eps: float = 1e-6
    tie_weights: TieWeights = "none"
    pad_id: int | None = 0
    attention_backend: AttentionBackend = "auto"

    def __post_init__(self) -> None:
        self._check_ints_and_choices(_POSITIVE_INTS, _CHOICES)
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not is_number(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be a float in [0, 1), got {name}={value!r}")
        if not is_number(self.layer_norm_eps) or not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be a positive float, got layer_norm_eps={self.layer_norm_eps!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model} "
                f"(d_k = d_model / n_heads must be an integer); head counts that would: {_divisors(self.d_model)}"
            )
        if self.positional_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"d_model={self.d_model} is odd: sinusoidal positional encoding pairs sin and cos "
                "dimensions and needs an even d_model (or use positional_encoding='learned')"
            )
        if self.tie_weights == "all" and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                f"tie_weights='all' shares one embedding between source and target, but "
                f"src_vocab={self.src_vocab} != tgt_vocab={self.tgt_vocab}; use tie_weights='target' or 'none'"
            )
        if self.pad_id is not None:
            if not is_int(self.pad_id):
                raise ValueError(f"pad_id must be an int or None, got {self.pad_id!r}")
            smallest = min(self.src_vocab, self.tgt_vocab)
            if not 0 <= self.pad_id < smallest:
                raise ValueError(
                    f"pad_id={self.pad_id} must be a token id in [0, {smallest}) "
                    f"(src_vocab={self.src_vocab}, tgt_vocab={self.tgt_vocab})"
                )

    @property
    def d_k(self) -> int:
        """Width of one attention head (d_k = d_v = d_model / h)."""
        return self.d_model // self.n_heads
