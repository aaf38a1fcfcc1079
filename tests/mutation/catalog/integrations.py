"""Mutants of the adapters into other code: the drop-in for F.scaled_dot_product_attention and grouped-query
attention, the Hugging Face attention function, and torch's flash-attention provider registry."""

from .base import Mutant

MUTANTS: list[Mutant] = []

# --- the drop-in for F.scaled_dot_product_attention (transformer/backends/sdpa.py) and grouped-query attention
_SDPA, _DROPIN_TESTS, _GQA_TESTS = (
    "transformer/backends/sdpa.py",
    ("tests/test_sdpa_dropin.py",),
    ("tests/test_gqa.py",),
)
_TORCH_BACKEND, _GROUPED = "transformer/backends/torch_backend.py", "transformer/backends/grouped.py"
_REFERENCE = "transformer/backends/sdpa_reference.py"  # the drop-in's eager backend (torch's definition)


_RULES = "transformer/backends/sdpa_rules.py"  # the drop-in's checks of torch's rules


def _dropin(
    id: str, old: str, new: str, what: str, tests: tuple[str, ...] = _DROPIN_TESTS, file: str = _SDPA
) -> Mutant:
    return Mutant(id, file, ((old, new),), what, tests)


MUTANTS += [
    _dropin(
        "dropin-empty-rows-uniform",
        "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)\n",
        "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1)\n",
        "the reference averages a fully masked row uniformly instead of returning 0",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-float-mask-as-bool",
        "            scores = scores + attn_mask.to(acc)\n",
        '            scores = scores.masked_fill(attn_mask == 0, float("-inf"))\n',
        "a float (additive) mask is read as a boolean one (nonzero = attend)",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-causal-bottom-right",
        "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n",
        "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(k.size(-2) - q.size(-2))\n",
        "is_causal aligned bottom-right (FlashAttention 2.1+) instead of torch's top-left",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-gqa-tiles-heads",
        "        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)\n",
        "        k = k.repeat(*([1] * (k.dim() - 3)), q.size(-3) // k.size(-3), 1, 1)\n",
        "GQA tiles the key heads (head i reads i % kv_heads) instead of grouping them (i // group)",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-scale-ignored",
        "        scores = scores * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)\n",
        "        scores = scores * (1.0 / math.sqrt(q.size(-1)))\n",
        "the reference ignores a given scale",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-dropout-ignored",
        "    if dropout_p > 0.0:\n",
        "    if dropout_p > 1.0:\n",
        "the reference never drops",
        file=_REFERENCE,
    ),
    _dropin(
        "dropin-mask-with-causal-accepted",
        "    if is_causal and attn_mask is not None:\n",
        "    if False:\n",
        "a mask together with is_causal is not refused (torch's fused CPU path ignores one of them)",
        file=_RULES,
    ),
    _dropin(
        "dropin-value-length-unchecked",
        "    if not _may_equal(value.size(-2), key.size(-2)):\n",
        "    if False:\n",
        "values of another length than the keys are not refused (torch's fused CPU path reads past them)",
        file=_RULES,
    ),
    _dropin(
        "dropin-mask-grows-weights",
        "    fits = len(shape) <= len(weights)\n",
        "    fits = True\n",
        "a mask with more dims than the attention weights is not refused",
        file=_RULES,
    ),
    _dropin(
        "dropin-kernel-gets-repeated-heads",
        "        h = t.size(-3) if enable_gqa and not own_heads else heads\n",
        "        h = heads\n",
        "the kernel gets key/value heads expanded to the query heads instead of in place",
    ),
    _dropin(
        "dropin-kernel-mask-padded-wrong-side",
        "        return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))\n",
        "        return mask.reshape(tuple(mask.shape[:-2]) + (1,) * (4 - mask.dim()) + tuple(mask.shape[-2:]))\n",
        "a low-rank mask reaches the kernel with its ones inserted before L instead of in front",
    ),
    _dropin(
        "dropin-structured-key-only-drops-causal",
        "    if mask.key_only():\n",
        "    if mask.key_only() or mask.causal:\n",
        "a causal AttentionMask with key lengths reaches torch as one key row (causality lost)",
        file=_TORCH_BACKEND,
    ),
    _dropin(
        "dropin-old-torch-tiles-heads",
        "        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)\n",
        "        key = key.repeat(1, query.size(-3) // key.size(-3), 1, 1)\n",
        "torch < 2.5 (no enable_gqa) gets tiled key heads",
        file=_TORCH_BACKEND,
    ),
    _dropin(
        "dropin-logging-breaks-the-graph",
        "    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):  # a Logger call is a graph break\n",
        "    if logger.isEnabledFor(logging.DEBUG) and not torch.compiler.is_compiling():  # a Logger call is a graph break\n",
        "the Logger is asked before is_compiling: a graph break, torch.compile(fullgraph=True) of a model "
        "calling the drop-in fails",
    ),
    _dropin(
        "dropin-context-ignored",
        'else (current_backend() or "auto")',
        'else "auto"',
        "a use_backend block does not choose the drop-in's backend",
    ),
    _dropin(
        "gqa-module-repeat-tiles",
        "    return k.repeat_interleave(heads // k.size(1), dim=1), v.repeat_interleave(heads // v.size(1), dim=1)\n",
        "    return k.repeat(1, heads // k.size(1), 1, 1), v.repeat_interleave(heads // v.size(1), dim=1)\n",
        "the modules' reference path tiles the shared key heads",
        _GQA_TESTS,
        _GROUPED,
    ),
    _dropin(
        "gqa-module-torch-without-gqa",
        "        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=True, **modifiers)\n",
        "        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=False, **modifiers)\n",
        "the modules' torch path forgets enable_gqa",
        _GQA_TESTS,
        _GROUPED,
    ),
    _dropin(
        "gqa-config-unchecked",
        'check_kv_heads(self.n_kv_heads, self.n_heads, "n_kv_heads", "n_heads", prefix="LMConfig: ")',
        "pass",
        "LMConfig accepts a kv head count that does not divide n_heads",
        _GQA_TESTS,
        "transformer/lm/config.py",
    ),
    _dropin(
        "gqa-lm-builds-full-heads",
        'grouped = {} if kind is PerHeadValueAttention else {"kv_heads": config.kv_heads}',
        "grouped = {}",
        "build_lm ignores n_kv_heads (full key/value heads, a cache per query head)",
        _GQA_TESTS,
        "transformer/lm/blocks.py",
    ),
]

# --- Hugging Face transformers (transformer/integrations/huggingface.py)
_HF, _HF_TESTS = "transformer/integrations/huggingface.py", ("tests/test_huggingface.py",)
MUTANTS += [
    _dropin(
        "hf-no-mask-function",
        (
            "    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask\n"
            "\n"
            "    AttentionInterface.register(name, attention_forward)\n"
            "    AttentionMaskInterface.register(name, sdpa_mask)\n"
        ),
        ("\n    AttentionInterface.register(name, attention_forward)\n"),
        "only the attention function is registered: the model builds no mask (padding lost)",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-causal-for-one-query",
        "    is_causal = q_len > 1 and attention_mask is None and causal_model\n",
        "    is_causal = attention_mask is None and causal_model\n",
        "one new token with a cache is run causally (top-left: it sees only the first key)",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-module-causality-ignored",
        '    causal_model = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))\n',
        "    causal_model = bool(True if is_causal is None else is_causal)\n",
        "an encoder (BERT) without a mask is run causally",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-gqa-not-enabled",
        "        enable_gqa=grouped,\n",
        "        enable_gqa=False,\n",
        "grouped-query models reach the drop-in without enable_gqa",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-position-bias-ignored",
        "    if position_bias is not None:  # an additive bias per head, combined with the mask as transformers' SDPA does\n",
        "    if False:  # an additive bias per head, combined with the mask as transformers' SDPA does\n",
        "T5's relative position bias is dropped",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-dropout-ignored",
        "        dropout_p=float(dropout),\n",
        "        dropout_p=0.0,\n",
        "the attention dropout transformers passes while training is dropped",
        _HF_TESTS,
        _HF,
    ),
]
MUTANTS += [
    _dropin(
        "hf-imports-transformers-eagerly",
        ("\nfrom torch import Tensor, nn\n"),
        ("\nimport transformers  # noqa: F401\nfrom torch import Tensor, nn\n"),
        "importing the integration imports transformers (seconds, and a hard dependency)",
        _HF_TESTS,
        _HF,
    ),
]

# --- torch's flash-attention provider registry (transformer/integrations/sdpa_registry.py)
_REG, _REG_TESTS = "transformer/integrations/sdpa_registry.py", ("tests/test_sdpa_registry.py",)
MUTANTS += [
    _dropin(
        "registry-lse-transposed",
        "    return out, lse, None, None, query.size(2), key.size(2), rng_state, offset, debug\n",
        "    return out, lse.transpose(1, 2).contiguous(), None, None, query.size(2), key.size(2), rng_state, offset, debug\n",
        "the logsumexp comes back as (batch, q_len, heads) instead of aten's (batch, heads, q_len)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-backward-fresh-seed",
        (
            "        lse,\n"
            "        None,\n"
            "        None,\n"
            "        None,\n"
            "        _seed(rng_state, dropout_p),\n"
            "        bool(is_causal),\n"
            "        _scale(scale, q.size(-1)),\n"
            "        float(dropout_p),\n"
            "    )\n"
        ),
        (
            "        lse,\n"
            "        None,\n"
            "        None,\n"
            "        None,\n"
            "        _seed(_rng_state(dropout_p, q.device)[0], dropout_p),\n"
            "        bool(is_causal),\n"
            "        _scale(scale, q.size(-1)),\n"
            "        float(dropout_p),\n"
            "    )\n"
        ),
        "the backward drops with a new seed instead of the forward's (rng_state ignored)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-output-left-bhsd",
        "    return out.transpose(1, 2), lse, rng_state, offset, debug\n",
        "    return out, lse, rng_state, offset, debug\n",
        "_flash_attention_forward returns (batch, heads, seq, dim) instead of aten's (batch, seq, heads, dim)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-default-scale",
        "return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)",
        "return 1.0 / head_dim if scale is None else float(scale)",
        "scale=None is 1/d, not 1/sqrt(d)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-refusals-ignored",
        (
            "        if (\n"
            "            value is not None\n"
            "            and value is not False\n"
            '            and not (name.startswith("window") and value == -1)\n'
            '            and not (name == "num_splits" and value <= 1)\n'
            "        ):\n"
        ),
        '        if False and not (name.startswith("window") and value == -1) and not (name == "num_splits" and value <= 1):\n',
        "varlen, windows, ALiBi, a debug mask are ignored instead of refused",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-causal-dropped",
        (
            "        q,\n"
            "        k,\n"
            "        v,\n"
            "        None,\n"
            "        None,\n"
            "        None,\n"
            "        _seed(rng_state, dropout_p),\n"
            "        bool(is_causal),\n"
            "        _scale(scale, q.size(-1)),\n"
            "        float(dropout_p),\n"
        ),
        "        q, k, v, None, None, None, _seed(rng_state, dropout_p), False, _scale(scale, q.size(-1)), float(dropout_p)\n",
        "the forward adapter ignores is_causal",
        _REG_TESTS,
        _REG,
    ),
]

# Issue 30, section 3: the core install and its extras, the docs' links, no warning under torch.compile.
_OPTIONAL_TESTS = ("tests/test_optional_dependencies.py",)
MUTANTS += [
    Mutant(
        "install-extra-command-ignores-metadata",
        "transformer/common/optional.py",
        (
            (
                "    return found or tuple(sorted(package for package, of in EXTRAS.items() if of == extra))",
                "    return tuple(sorted(package for package, of in EXTRAS.items() if of == extra))",
            ),
        ),
        'the missing-package message tells `pip install "sacrebleu" "tokenizers"` without the extra\'s version '
        "specifiers, though the metadata declares them",
        _OPTIONAL_TESTS,
    ),
    Mutant(
        "install-translate-checks-bleu-after-training",
        "transformer/cli/train_files.py",
        (
            (
                '    if args.task == "translate":\n        require("sacrebleu"',
                '    if args.task == "never":\n        require("sacrebleu"',
            ),
        ),
        "train translate without sacrebleu trains the whole model, then fails at the BLEU score",
        _OPTIONAL_TESTS,
    ),
    Mutant(
        "install-cli-missing-package-traceback",
        "transformer/cli/__init__.py",
        (
            (
                "except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError, MissingDependencyError) as error:",
                "except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError) as error:",
            ),
        ),
        "a missing package of the text extra ends the command with a traceback instead of one line and exit 2",
        _OPTIONAL_TESTS,
    ),
    Mutant(
        "install-validate-lru-cache-traced",
        "kernels/_validate.py",
        (("    return cached.__wrapped__ if torch.compiler.is_compiling() else cached", "    return cached"),),
        "Dynamo warns twice about the lru_cache wrappers of kernels/_validate.py in a user's compiled model",
        ("tests/test_triton_backend.py",),
    ),
]
