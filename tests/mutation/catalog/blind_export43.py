"""Blind review of the exportable fine-tune (2026-12-02): tokenizer.json readable by tokenizers, `typed-transformer
export` / export_pretrained, load_checkpoint in eval mode, PEFT/LoRA adapters; by a reviewer who did not read the
tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-x43-load-checkpoint-built-model-in-train-mode",
        "transformer/checkpoint/load.py",
        (("    if built:\n        model.eval()\n", "    if not built:\n        model.eval()\n"),),
        "The condition is inverted: the model load_checkpoint builds from the stored config comes back in training "
        "mode (ckpt.model.training is True, dropout active), against its docstring and pretrained.md ('comes back "
        "in eval mode, as from_pretrained returns one'); and a model passed in is switched to eval instead of "
        "keeping its mode.",
    ),
    Mutant(
        "blind-x43-tokenizer-json-keeps-our-fields",
        "transformer/data/tokenizers.py",
        (("            TOKENIZER_FILE: self.tokenizer.to_str(),\n", "            TOKENIZER_FILE: self.to_json(),\n"),),
        "TextTokenizer.files() (what attach_tokenizer puts in the checkpoint and save() writes) puts to_json() in "
        "tokenizer.json: the library's JSON with typed_transformer_kind inside, the old one-file format. Our own "
        "readers still cope, but tokenizers.Tokenizer.from_file and PreTrainedTokenizerFast(tokenizer_file=...) "
        "refuse the checkpoint's tokenizer.json, against data.md's 'the library's own file and nothing else'.",
    ),
    Mutant(
        "blind-x43-fingerprint-keys-unsorted",
        "transformer/data/tokenizers.py",
        (
            (
                "        data.update(self.extra())\n        return json.dumps(data, sort_keys=True, ensure_ascii=False)\n",
                "        data.update(self.extra())\n        return json.dumps(data, ensure_ascii=False)\n",
            ),
        ),
        "to_json no longer sorts keys, so the fingerprint (its SHA-256) is no longer the SHA-256 of the one "
        "tokenizer.json of before 2026-12-02: a checkpoint saved before then (and its data caches) is refused with "
        "TokenizerMismatchError ('is not the one the model was trained with'), against 'still read, to the same "
        "tokenizer and fingerprint'.",
    ),
    Mutant(
        "blind-x43-attach-tokenizer-drops-origin-asset",
        "transformer/tasks/tokenizer_assets.py",
        (
            (
                '    model.checkpoint_assets = {**getattr(model, "checkpoint_assets", {}), **files}\n',
                "    model.checkpoint_assets = files\n",
            ),
        ),
        "attach_tokenizer replaces the model's checkpoint_assets instead of adding to them ('other assets kept'): "
        "the pretrained_origin.json load_pretrained_lm set is dropped, so a train lm --init checkpoint no longer "
        "records its pretrained folder and, once that folder is deleted, export refuses it ('which is gone ... put "
        "that folder back') instead of writing the fine-tune as the folder's architecture.",
    ),
    Mutant(
        "blind-x43-to-holding-checkpoint-allowed",
        "transformer/tasks/hf_export.py",
        (
            (
                "    if os.path.commonpath([real_out, os.path.realpath(checkpoint)]) == real_out:\n",
                "    if os.path.commonpath([real_out, os.path.realpath(checkpoint)]) == os.path.realpath(checkpoint):\n",
            ),
        ),
        "The containment test is turned around: a --to that holds the checkpoint (its parent folder) is no longer "
        "refused as 'is the checkpoint ... or holds it' (without --overwrite it is refused as merely not empty; with "
        "--overwrite it is replaced whole, deleting the checkpoint), while a --to inside the checkpoint is refused "
        "wrongly.",
    ),
    Mutant(
        "blind-x43-refusal-names-farthest-architecture",
        "transformer/tasks/hf_export.py",
        (("    _, count, name, reason = min(reasons)\n", "    _, count, name, reason = max(reasons)\n"),),
        "The refusal of train lm's own formulation picks the architecture with the MOST differing fields: the one "
        "line names the farthest architecture and its field count, not 'the closest architecture and every field "
        "that differs' (pretrained.md).",
    ),
    Mutant(
        "blind-x43-bos-eos-tokens-swapped",
        "transformer/tasks/tokenizer_assets.py",
        (
            (
                '    ids = {"bos_token": tokenizer.bos_id, "eos_token": tokenizer.eos_id, "pad_token": tokenizer.pad_id}\n',
                '    ids = {"bos_token": tokenizer.eos_id, "eos_token": tokenizer.bos_id, "pad_token": tokenizer.pad_id}\n',
            ),
        ),
        "Swapped arguments: the exported tokenizer_config.json of a model trained from scratch says bos_token '</s>' "
        "and eos_token '<s>', so AutoTokenizer's bos_token_id/eos_token_id are 2/1 while config.json and "
        "generation_config.json say 1/2; the promise is our <s> 1 as start and </s> 2 as end.",
    ),
    Mutant(
        "blind-x43-pad-id-not-carried",
        "transformer/lm/pretrained/save.py",
        (
            (
                '_CARRIED = ("bos_token_id", "eos_token_id", "pad_token_id")\n',
                '_CARRIED = ("bos_token_id", "eos_token_id")\n',
            ),
        ),
        "save_pretrained no longer carries pad_token_id: an exported model (trained from scratch, or a fine-tune "
        "whose folder had one) has no pad_token_id in config.json or generation_config.json, against 'the bos, eos "
        "and padding ids in config.json and generation_config.json'.",
    ),
    Mutant(
        "blind-x43-chat-template-jinja-dropped",
        "transformer/tasks/hf_export.py",
        (
            (
                '    "special_tokens_map": "special_tokens_map.json",\n    "chat_template": "chat_template.jinja",\n}\n',
                '    "special_tokens_map": "special_tokens_map.json",\n}\n',
            ),
        ),
        "chat_template.jinja is no longer recorded in pretrained_origin.json nor written by export: a fine-tune of a "
        "folder that keeps its chat template in chat_template.jinja (as recent transformers save it) exports with no "
        "chat template, so AutoTokenizer's apply_chat_template fails or differs from the original's.",
    ),
    Mutant(
        "blind-x43-adapter-names-lose-peft-prefix",
        "transformer/lm/pretrained/adapters.py",
        (
            (
                "        tensors[_PREFIX + _their_module(chosen, module, weights) + factor + rest] = tensor\n",
                "        tensors[_their_module(chosen, module, weights) + factor + rest] = tensor\n",
            ),
        ),
        "save_adapter_for_transformers drops PEFT's 'base_model.model.' prefix from the renamed tensors "
        "('model.layers.0.self_attn.q_proj.lora_A.weight'): PeftModel.from_pretrained on transformers' model "
        "matches none of them, leaves the fresh factors (lora_B zero) and computes the base logits, not our adapted "
        "ones.",
    ),
]

_TESTS = (
    "tests/test_pretrained_export.py",
    "tests/test_checkpoint_tokenizer_files.py",
    "tests/test_peft_lora.py",
    "tests/test_cli_lm.py",
    "tests/test_data_tokenizers.py",
    "tests/test_checkpoint.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
