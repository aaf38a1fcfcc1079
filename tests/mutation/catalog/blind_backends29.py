"""Blind review of issue 29 backends and integrations (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-b29-torch-window-dropped",
        "transformer/backends/torch_backend.py",
        (
            (
                "    if mask.causal and not mask.tensors() and not mask.has_window():",
                "    if mask.causal and not mask.tensors():",
            ),
        ),
        "On the torch backend a causal AttentionMask with a sliding window (window_left/window_right, no tensors) "
        "becomes plain is_causal: the window is silently ignored and queries see every earlier key.",
    ),
    Mutant(
        "blind-b29-alibi-causal-bottom-right",
        "transformer/backends/torch_backend.py",
        (
            (
                "        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=bias.device).tril()",
                "        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=bias.device).tril(k_len - q_len)",
            ),
        ),
        "With ALiBi and is_causal on the torch backend, q_len < k_len is masked bottom-right instead of torch's "
        "top-left j <= i: queries see later keys and the output differs from eager.",
    ),
    Mutant(
        "blind-b29-torch-softcap-drops-alibi",
        "transformer/backends/torch_backend.py",
        (
            (
                '        modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}\n        return reference(',
                '        modifiers = {"softcap": softcap, "sinks": sinks}\n        return reference(',
            ),
        ),
        "On the torch backend, softcap together with alibi_slopes applies the cap only: the ALiBi bias is lost "
        "(ALiBi alone still works), so the output differs from eager's.",
    ),
    Mutant(
        "blind-b29-dropin-softcap-alone-ignored",
        "transformer/backends/sdpa.py",
        (
            (
                "    if softcap is not None or alibi_slopes is not None or sinks is not None:\n        _check_modifiers(",
                "    if alibi_slopes is not None or sinks is not None:\n        _check_modifiers(",
            ),
        ),
        "The drop-in scaled_dot_product_attention(softcap=c) without alibi_slopes neither checks nor applies the "
        "cap: the output is the uncapped attention and softcap=-1 is accepted.",
    ),
    Mutant(
        "blind-b29-named-triton-skips-modifier-check",
        "transformer/backends/choice.py",
        (
            (
                "        reason = triton_unsupported_reason(q, k, v, mask, dropout_p, scale, **modifiers)",
                "        reason = triton_unsupported_reason(q, k, v, mask, dropout_p, scale)",
            ),
        ),
        "backend='triton' asked by name with softcap/alibi_slopes no longer asks the kernel about them: a kernel "
        "without those arguments is chosen instead of refused with 'does not take softcap'.",
    ),
    Mutant(
        "blind-b29-alibi-buffer-persistent",
        "transformer/attention.py",
        (
            (
                'self.register_buffer("alibi_slopes", alibi_slopes, persistent=False)',
                'self.register_buffer("alibi_slopes", alibi_slopes, persistent=True)',
            ),
        ),
        "A module built with alibi_slopes gets an 'alibi_slopes' key in its state_dict, so its checkpoints differ "
        "from one without and fail to load strictly into a module built without slopes.",
    ),
    Mutant(
        "blind-b29-record-attention-drops-modifiers",
        "transformer/attention.py",
        (
            (
                "q, k, v, dense_heads_mask(mask, q.size(2), k.size(2)), dropout, self.scale, **modifiers",
                "q, k, v, dense_heads_mask(mask, q.size(2), k.size(2)), dropout, self.scale",
            ),
        ),
        "With record_attention=True a module's softcap and ALiBi are ignored: the output and the recorded "
        "probabilities self.attn differ from the same module's output without recording.",
    ),
    Mutant(
        "blind-b29-hf-structure-drops-padding",
        "transformer/integrations/huggingface.py",
        (
            (
                "    dense = None if mask is None else mask[:, 0].expand(-1, q_len, -1)",
                "    dense = None",
            ),
        ),
        "When the adapter builds an AttentionMask (sliding window or packed documents) it drops the boolean mask "
        "transformers built: in a left-padded Mistral batch the real tokens attend to the padding keys and their "
        "logits change.",
    ),
    Mutant(
        "blind-b29-hf-packed-needs-every-row",
        "transformer/integrations/huggingface.py",
        (
            (
                "    return documents if bool(documents[:, -1].any()) else None",
                "    return documents if bool(documents[:, -1].all()) else None",
            ),
        ),
        "In a batch where only some rows restart their position_ids (packed documents), no row is split into "
        "documents: the packed row's second document attends to the first.",
    ),
    Mutant(
        "blind-b29-hf-softcap-from-module",
        "transformer/integrations/huggingface.py",
        (
            (
                '        softcap=kwargs.get("softcap"),',
                '        softcap=getattr(module, "softcap", None),',
            ),
        ),
        "The Hugging Face adapter reads the cap from a module attribute that Gemma 2 does not have instead of the "
        "softcap argument: Gemma 2's attn_logit_softcapping is silently ignored and logits differ from eager's.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 8/10: on commit 762f5d5's i29-backends merge,
# before the tests the review prompted).
_TESTS = (
    "tests/test_structures_on_backends.py",
    "tests/test_score_modifiers_in_modules.py",
    "tests/test_huggingface_structures.py",
    "tests/test_sdpa_dropin.py",
    "tests/test_huggingface.py",
    "tests/test_backends.py",
    "tests/test_mask_documents.py",
    "tests/test_structured_masks.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
