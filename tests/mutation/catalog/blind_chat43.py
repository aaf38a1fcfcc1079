"""Blind review of issue 43's chat templates, streaming, batch tokenization, per-prompt seeds and transformers' beam
search (2026-12-02), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-c43-left-pad-mask-wrong-side",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                "                masks = [h + m for h, m in zip(holes, masks, strict=True)]\n",
                "                masks = [m + h for h, m in zip(holes, masks, strict=True)]\n",
            ),
        ),
        "Left padding puts the pad ids on the left but the mask's zeros on the right: tokenizer(texts, padding=True, "
        "padding_side='left') gives attention_mask [[1, 1, 1], [1, 0, 0]] for input_ids [[5, 6, 7], [0, 0, 8]] "
        "(docs/pretrained.md: [[1, 1, 1], [0, 0, 1]], 1 = a real token, transformers' mask for the same side); "
        "generate from it then attends to the pads and drops the real token (or refuses a 'right-padded' mask).",
    ),
    Mutant(
        "blind-c43-padding-side-default-left",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                '        side = settings.get("padding_side", "right")\n',
                '        side = settings.get("padding_side", "left")\n',
            ),
        ),
        "A folder whose tokenizer_config.json names no padding_side gets padding_side 'left' instead of the documented "
        "default 'right' (as transformers): tokenizer(texts, padding=True) with no padding_side= pads on the left, "
        "so its input_ids and attention_mask differ from transformers' for the same folder.",
    ),
    Mutant(
        "blind-c43-chat-ids-second-bos",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                "            add_special_tokens=False,\n            return_tensors=return_tensors,\n",
                "            add_special_tokens=True,\n            return_tensors=return_tensors,\n",
            ),
        ),
        "apply_chat_template's ids are encoded with the post-processor's special tokens: a template that writes "
        "{{ bos_token }} (Llama 3's shape) gives two start tokens where transformers' apply_chat_template (and the "
        "docs: 'encoded with add_special_tokens=False ... one start token, not two') gives one; generate --chat on "
        "such a folder answers a different prompt.",
    ),
    Mutant(
        "blind-c43-extra-keyword-no-override",
        "transformer/lm/pretrained/tokenizer.py",
        (("            **{**tokens, **variables},\n", "            **{**variables, **tokens},\n"),),
        "The special tokens now override the extra keywords instead of the reverse: "
        "apply_chat_template(messages, bos_token='<x>') still renders the folder's own bos_token, breaking the "
        "documented 'an extra keyword reaches the template and overrides a special token' (transformers' rule).",
    ),
    Mutant(
        "blind-c43-no-lstrip-blocks",
        "transformer/lm/pretrained/chat_template.py",
        (
            (
                "    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, ",
                "    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=False, ",
            ),
        ),
        "The jinja2 environment no longer has lstrip_blocks (documented: transformers' environment, trim_blocks and "
        "lstrip_blocks): a template whose {% ... %} tags are indented keeps the indentation before each tag, so the "
        "rendered prompt text (and its ids) holds spaces that transformers' apply_chat_template does not.",
    ),
    Mutant(
        "blind-c43-stream-drops-prompt-context",
        "transformer/decoding/streaming.py",
        (
            (
                "        text = whole[len(head) :] if whole.startswith(head) else self._decode(self.new)\n",
                "        text = self._decode(self.new)\n",
            ),
        ),
        "TextStreamer decodes the continuation alone instead of after its prompt: with a SentencePiece tokenizer "
        "(Llama) the continuation's leading space is dropped, so the pieces joined are no longer 'exactly the text "
        "of the whole continuation' nor what transformers' TextStreamer prints (generate streaming vs --no-stream "
        "differ: 'Hello' + 'world' instead of 'Hello world').",
    ),
    Mutant(
        "blind-c43-beam-cli-streams",
        "transformer/cli/checkpoint_commands.py",
        (("    stream = not args.no_stream and args.beam_size == 1\n", "    stream = not args.no_stream\n"),),
        "generate --beam-size K (K > 1) without --no-stream builds a streamer and hands it to beam search, which "
        "takes none: the command exits 2 ('generate: num_beams=K (beam search) takes no streamer') instead of "
        "printing the beam continuation at the end as --no-stream's help and docs/lm.md promise ('beam search "
        "always prints at the end').",
    ),
    Mutant(
        "blind-c43-first-seed-for-all",
        "transformer/cli/checkpoint_commands.py",
        (("                    seed=seeds[n],\n", "                    seed=seeds[0],\n"),),
        'Per-prompt seeds are ignored: `generate --sample --seed 1 --seed 2 "a" "b"` samples prompt b with seed 1, '
        'so a prompt and its seed no longer give the same text alone (`--seed 2 "b"`) and among other prompts, as '
        "the --seed help and docs/lm.md promise.",
    ),
    Mutant(
        "blind-c43-chat-no-generation-prompt",
        "transformer/cli/checkpoint_commands.py",
        (
            (
                "        return tokenizer.apply_chat_template(messages, add_generation_prompt=True)\n",
                "        return tokenizer.apply_chat_template(messages)\n",
            ),
        ),
        "generate --chat renders each user message without add_generation_prompt: the prompt ends after the user's "
        "turn, without the template's opening of the assistant's answer (--chat's help: 'rendered with the folder's "
        "chat template and add_generation_prompt, as transformers' apply_chat_template'), so the printed answer is "
        "not transformers' generate on the same rendered prompt.",
    ),
    Mutant(
        "blind-c43-beam-penalty-counts-prompt",
        "transformer/decoding/beam_transformers.py",
        (
            (
                "        final = scores / ((cur + 1 - prompt_len) ** length_penalty)\n",
                "        final = scores / ((cur + 1) ** length_penalty)\n",
            ),
        ),
        "A finished hypothesis's score divides by the whole length (prompt included) ** length_penalty instead of the "
        "generated tokens' count (documented: 'sum log p / generated_tokens ** length_penalty', transformers' "
        "cur_len + 1 - decoder_prompt_len): with length_penalty != 0 and hypotheses ending at different lengths, "
        "generate(num_beams=K) picks a different best hypothesis than transformers' beam search.",
    ),
]

_TESTS = (
    "tests/test_chat_templates.py",
    "tests/test_lm_streaming.py",
    "tests/test_tokenizer_batches.py",
    "tests/test_cli_chat_stream.py",
    "tests/test_lm_beam_transformers.py",
    "tests/test_cli_generate_flags.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
