"""Tiny Hugging Face models for the checkpoint-folder tests: built from transformers' own config classes with
random weights (never downloaded), saved with its ``save_pretrained``, and a left-padded batch to compare on.

Every 1-D parameter (norm gains, biases) is drawn around its initial value, so that a norm or bias read into the
wrong place changes the logits; a model's output is compared on the real (not padded) positions only.
"""

from __future__ import annotations

import copy

import torch

from transformer.masks import AttentionMask

VOCAB = 97


def hf_config(transformers, kind: str, **overrides):
    """A tiny config of ``kind`` (gpt2, llama, qwen2, qwen3, mistral, starcoder2, phi3): 2 layers, d_model 32, 4 heads,
    vocab 97; the norms' eps far from every architecture's default (0.02, GPT-2's 0.03), so that an eps read from
    the wrong field (or not read) changes the logits."""
    if kind == "gpt2":
        fields = dict(
            vocab_size=VOCAB, n_positions=48, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0, layer_norm_epsilon=0.03,
        )  # fmt: skip
        return transformers.GPT2Config(**{**fields, **overrides})
    fields = dict(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    )  # fmt: skip
    if kind == "starcoder2":
        fields["norm_epsilon"] = fields.pop("rms_norm_eps")
        fields["sliding_window"] = 5
    if kind == "phi3":
        fields["rope_parameters"] = {**fields["rope_parameters"], "partial_rotary_factor": 0.5}  # 4 of d_k 8
        fields["sliding_window"] = 6
    classes = {
        "phi3": transformers.Phi3Config,
        "starcoder2": transformers.Starcoder2Config,
        "llama": transformers.LlamaConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "mistral": transformers.MistralConfig,
    }
    if kind == "qwen3":
        fields["head_dim"] = 12  # Qwen3's head_dim is its own field: not d_model / n_heads
    if kind == "mistral":
        fields["sliding_window"] = 4
    return classes[kind](**{**fields, **overrides})


MODEL_CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}


def hf_model(transformers, kind: str, seed: int = 0, **overrides):
    """A random tiny model of ``kind`` in eval mode (sdpa attention: in float64 its eager attention gives NaN where a
    left-padded row's pads are queries, and from there in the next layer's real rows), its 1-D parameters spread out."""
    config = hf_config(transformers, kind, **overrides)
    torch.manual_seed(seed)
    model = getattr(transformers, MODEL_CLASSES[kind])._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name or "ln_" in name else 0.0, 0.3)
    return model.eval()


def left_padded_batch(seed: int = 1, rows: int = 3, steps: int = 11, pads=(0, 3, 6)):
    """Token ids (rows, steps) in [3, VOCAB) and the attention mask (True = real), row r padded on the left by
    ``pads[r]`` (pad id 0)."""
    tokens = torch.randint(3, VOCAB, (rows, steps), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(rows, steps, dtype=torch.bool)
    for r, pad in enumerate(pads):
        mask[r, :pad] = False
    return tokens.masked_fill(~mask, 0), mask


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted from its row's first real token (as transformers': cumsum - 1, clamped)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def hf_logits(model, tokens, mask):
    return model(input_ids=tokens, attention_mask=mask.long(), position_ids=positions_of(mask)).logits


def our_logits(model, tokens, mask):
    return model.logits(tokens, AttentionMask(key_mask=mask), positions=positions_of(mask))


def assert_logits_close(ours, theirs, mask, dtype=torch.float32):
    """Equal on the real positions: within 1e-5 x max|logit| in float32, 1e-10 in float64."""
    ours, theirs = ours[mask], theirs[mask]
    tolerance = 1e-10 if dtype == torch.float64 else 1e-5 * theirs.abs().max().item()
    error = (ours - theirs).abs().max().item()
    assert error <= tolerance, f"max |ours - theirs| = {error:.3g} > {tolerance:.3g}"
    return error


def assert_gradients_equal(theirs, ours, architecture: str, rename=None, every_tensor: bool = False) -> None:
    """The gradients of one loss (the masked cross-entropy of seeded labels on :func:`left_padded_batch`) through
    their float64 model and ours, compared tensor by tensor through ``architecture``'s maps (rtol 1e-8, atol
    1e-10). ``rename``: their parameter names as the maps spell them; ``every_tensor``: the maps also cover each of
    their parameters."""
    from transformer.lm.pretrained.supported import ARCHITECTURES

    tokens, mask = left_padded_batch()
    labels = torch.randint(3, VOCAB, tokens.shape, generator=torch.Generator().manual_seed(5))

    def loss(logits):
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        return (nll * mask.double()).sum()

    loss(our_logits(ours, tokens, mask)).backward()
    loss(hf_logits(theirs, tokens, mask)).backward()
    theirs_grads = {(rename or (lambda name: name))(name): p.grad for name, p in theirs.named_parameters()}
    ours_params = dict(ours.named_parameters())
    maps = ARCHITECTURES[architecture].tensor_maps(list(ours_params), ours.config)
    if every_tensor:
        assert {m.theirs for m in maps} == set(theirs_grads)
    for m in maps:
        got = m.to_theirs(tuple(ours_params[n].grad for n in m.ours))
        torch.testing.assert_close(got, theirs_grads[m.theirs], rtol=1e-8, atol=1e-10, msg=m.theirs)


def their_greedy(model, tokens, mask, new: int):
    """transformers' greedy continuation of the left-padded ``tokens``: exactly ``new`` tokens (no end id)."""
    return model.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=new, min_new_tokens=new,
        pad_token_id=0, eos_token_id=None,
    )[:, tokens.size(1) :]  # fmt: skip


def our_greedy(model, tokens, mask, new: int, **options):
    """Our greedy continuation of the left-padded ``tokens`` (``new`` tokens; ``options`` reach ``generate``)."""
    from transformer.lm import generate

    return generate(model, tokens, new, prompt_mask=mask, pad_symbol=0, **options)[:, tokens.size(1) :]


def reweighted(model, forget_origin: bool = True):
    """``model`` with its own random weights (seed 3, N(0, 0.5^2), the norms' too), never a transformers model's;
    ``forget_origin``: saved as the architecture its config alone chooses."""
    if forget_origin:
        del model.pretrained_origin
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model
