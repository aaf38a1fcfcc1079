"""Mutants of the contracts, the checks switch, the config and its plumbing into the modules."""

from .base import K, M, Mutant  # noqa: F401

MUTANTS: list[Mutant] = []

# --- config plumbing: killed by tests/test_config_plumbing.py (every LayerNorm's eps and the stacks written out
# with it, pad_id into decoding, the structural fields, the mask constructors' corner cases)
PLUMBING_TESTS = ("tests/test_config_plumbing.py",)


def P(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    """A one-edit config-plumbing mutant, run against PLUMBING_TESTS."""
    return Mutant(id, file, ((old, new),), what, PLUMBING_TESTS)


MUTANTS += [
    P(
        "plumb-encoder-final-norm-default-eps",
        "transformer/encoder.py",
        "        self.norm = LayerNorm(layer.size, layer.eps)\n",
        "        self.norm = LayerNorm(layer.size)\n",
        "the encoder stack's final LayerNorm is built with the default eps",
    ),
    P(
        "plumb-decoder-final-norm-default-eps",
        "transformer/decoder.py",
        "        self.norm = LayerNorm(layer.size, layer.eps)\n",
        "        self.norm = LayerNorm(layer.size)\n",
        "the decoder stack's final LayerNorm is built with the default eps",
    ),
    P(
        "plumb-sublayer-norm-default-eps",
        "transformer/layers.py",
        "self.norm = LayerNorm(size, eps)",
        "self.norm = LayerNorm(size)",
        "SublayerConnection ignores its eps argument",
    ),
    P(
        "plumb-encoder-layer-eps-not-passed",
        "transformer/encoder.py",
        "clones(SublayerConnection(size, dropout, norm_placement, eps), 2)",
        "clones(SublayerConnection(size, dropout, norm_placement), 2)",
        "EncoderLayer does not pass eps to its SublayerConnections",
    ),
    P(
        "plumb-decoder-layer-eps-not-passed",
        "transformer/decoder.py",
        "clones(SublayerConnection(size, dropout, norm_placement, eps), 3)",
        "clones(SublayerConnection(size, dropout, norm_placement), 3)",
        "DecoderLayer does not pass eps to its SublayerConnections",
    ),
    P(
        "plumb-build-model-default-eps",
        "transformer/model.py",
        "eps, placement = config.layer_norm_eps, config.norm_placement",
        "eps, placement = 1e-6, config.norm_placement",
        "build_model ignores config.layer_norm_eps",
    ),
    P(
        "plumb-layernorm-eps-hardcoded",
        "transformer/layers.py",
        "self.weight, self.bias, self.eps)",
        "self.weight, self.bias, 1e-6)",
        "LayerNorm.forward uses a hard-coded eps instead of self.eps",
    ),
    P(
        "plumb-build-model-ignores-activation",
        "transformer/model.py",
        "ff = PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)",
        "ff = PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout)",
        "build_model ignores config.activation (always relu)",
    ),
    P(
        "plumb-decoder-layers-from-encoder-count",
        "transformer/model.py",
        "            config.n_decoder_layers,\n",
        "            config.n_encoder_layers,\n",
        "the decoder stack gets n_encoder_layers layers",
    ),
    P(
        "plumb-decoding-pad-ignores-config",
        "transformer/decoding/requests.py",
        '        pad_symbol = getattr(config, "pad_id", None)\n',
        "        pad_symbol = None\n",
        "decoding pads after the end symbol with the end symbol even when the config has a pad id",
    ),
    P(
        "mask-target-none-pads-zero",
        "transformer/masks.py",
        "    if pad_id is None:\n        return causal.expand(tgt.size(0), -1, -1)\n    real = tgt != pad_id",
        "    real = tgt != (0 if pad_id is None else pad_id)",
        "target_mask(tgt, None) treats token 0 as padding (rows and keys)",
    ),
    P(
        "mask-target-pad-keys-visible",
        "transformer/masks.py",
        "return causal & real.unsqueeze(-2) & real.unsqueeze(-1)",
        "return causal & real.unsqueeze(-1)",
        "target_mask hides padded query rows but not padded keys",
    ),
]

# --- the eager fast path (transformer/contracts/fast.py): killed by tests/test_contracts_fast.py, which compares its
# decisions with jaxtyping's on random calls
FAST_TESTS = ("tests/test_contracts_fast.py",)


def E(id: str, old: str, new: str, what: str, file: str = "transformer/contracts/fast.py") -> Mutant:
    return Mutant(id, file, ((old, new),), what, FAST_TESTS)


MUTANTS += [
    E(
        "contract-fast-broadcast-axis-compared",
        '            guard = src.block(f"if {size} != 1:")\n',
        '            guard = src.block("if True:")\n',
        "the fast path compares (and binds) a size-1 '#name' axis",
    ),
    E(
        "contract-fast-dtype-unchecked",
        "        src.emit(f\"if {value}.dtype not in {src.const(frozenset(dtypes), '_D')}: {_fail(src, fail)}\")\n",
        "        src.emit(f\"if False and {value}.dtype not in {src.const(frozenset(dtypes), '_D')}: {_fail(src, fail)}\")\n",
        "the fast path accepts any dtype",
    ),
    E(
        "contract-fast-union-keeps-failed-bindings",
        "            src.restore.append([f\"({', '.join(names)},) = {saved}\"])\n",
        "            src.restore.append([])\n",
        "a failed union alternative leaves its sizes bound in the fast path",
    ),
    E(
        "contract-fast-defaults-checked",
        '            with src.conditional(), src.block(f"if {given[p.name]}:"):\n',
        '            with src.conditional(), src.block("if True:"):\n',
        "the fast path checks default values beartype does not check",
    ),
    E(
        "contract-fast-variadic-broadcast-not-joined",
        "        return None if joint is None or not same_sizes(joint, previous) else (False, previous)\n",
        "        return None if joint is None else (False, previous)\n",
        "'*#name' after '*name' accepts shapes that widen the bound ones",
        "transformer/contracts/grammar.py",
    ),
    E(
        "contract-fast-field-any-type",
        "        src.emit(f\"if type({value}) is not int{'' if alone else f' or {value} < 0'}: raise _Miss\")\n",
        "        pass\n",
        "the fast path evaluates {fields} itself whatever they hold (jaxtyping formats them into text first)",
    ),
    E(
        "contract-fast-name-rebinds",
        "            src.single[value] = BOUND\n",
        "            src.single[value] = UNBOUND\n",
        "a dimension name seen again binds anew instead of being compared",
    ),
    E(
        "contract-fast-return-compares-rank-only",
        '        src.emit(f"if {shape} != {earlier}: {_fail(src, fail)}")\n',
        '        src.emit(f"if len({shape}) != len({earlier}): {_fail(src, fail)}")\n',
        "a return value promising an argument's shape is compared by rank only",
    ),
    E(
        "contract-fast-scalar-rank-unchecked",
        "        if not top or not rank:  # (at the top, unpacking the wrong number of sizes raises: jaxtyping decides)\n",
        "        if not top:  # (at the top, unpacking the wrong number of sizes raises: jaxtyping decides)\n",
        "a 0-dimensional annotation accepts a tensor of any rank",
    ),
    E(
        "contract-fast-return-unchecked",
        '        _hint(src, signature.return_annotation, "out", "raise _Miss")\n',
        "        pass\n",
        "the fast path never checks return values",
    ),
]
