"""Blind review of reading and writing Hugging Face checkpoint folders (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-pretrained-index-before-weights",
        "transformer/lm/pretrained/files.py",
        (
            (
                "if (folder / WEIGHTS_FILE).is_file():  # first, as transformers looks for it first",
                "if (folder / WEIGHTS_FILE).is_file() and not (folder / INDEX_FILE).is_file():",
            ),
        ),
        "A folder holding both model.safetensors and a model.safetensors.index.json (with its shards) loads the "
        "shards' weights instead of model.safetensors, which transformers (and the docs) read: other logits.",
    ),
    Mutant(
        "blind-pretrained-base-prefix-all",
        "transformer/lm/pretrained/architectures.py",
        (
            (
                "if any(name.startswith(self.base_prefix) for name in file_names):",
                "if all(name.startswith(self.base_prefix) for name in file_names):",
            ),
        ),
        "An untied Llama-family checkpoint (model.* tensors plus lm_head.weight) is taken for a base-model file: "
        "the model. prefix is stripped and from_pretrained refuses it with 'missing tensor embed_tokens.weight'.",
    ),
    Mutant(
        "blind-pretrained-gpt2-n-inner-null",
        "transformer/lm/pretrained/gpt2.py",
        (
            (
                'd_ff=config.integer("n_inner", None, optional=True) or 4 * d_model,',
                'd_ff=config.integer("n_inner", 4 * d_model, optional=True),',
            ),
        ),
        "A GPT-2 config.json with n_inner: null (what transformers writes by default) no longer means 4 d_model: "
        "every default GPT-2 folder is refused as a model LMConfig refuses (d_ff=None).",
    ),
    Mutant(
        "blind-pretrained-qwen3-no-out-bias",
        "transformer/lm/pretrained/llama.py",
        (
            (
                'return {"qkv_bias": attention, "out_bias": attention, "ffn_bias": False}',
                'return {"qkv_bias": attention, "out_bias": False, "ffn_bias": False}',
            ),
        ),
        "A Qwen3 checkpoint with attention_bias=true is refused (o_proj.bias reported as an unexpected tensor), "
        "and a model with qkv and output biases can no longer be saved as Qwen3.",
    ),
    Mutant(
        "blind-pretrained-starcoder2-eps-field",
        "transformer/lm/pretrained/starcoder2.py",
        (
            (
                'layer_norm_eps=config.number("norm_epsilon", 1e-5),',
                'layer_norm_eps=config.number("layer_norm_epsilon", 1e-5),',
            ),
        ),
        "StarCoder2's norm_epsilon is read from GPT-2's field name: a checkpoint with a non-default norm_epsilon "
        "loads with eps 1e-5 (other logits), and saving such a model as StarCoder2 is refused.",
    ),
    Mutant(
        "blind-pretrained-rope-unknown-keys-accepted",
        "transformer/lm/pretrained/rope.py",
        (("    rope.only(_KEYS[kind])\n", ""),),
        "Keys of rope_parameters / rope_scaling that the rule does not have (a low_freq_factor in a linear rule, a "
        "misspelt factor) are silently ignored instead of refused by name.",
    ),
    Mutant(
        "blind-pretrained-not-eval",
        "transformer/lm/pretrained/load.py",
        (("    model.eval()\n    generation = read_json", "    generation = read_json"),),
        "from_pretrained returns the model in training mode: a GPT-2 checkpoint (dropout 0.1) gives different "
        "logits on every call instead of transformers' eval-mode ones.",
    ),
    Mutant(
        "blind-pretrained-tied-head-written-twice",
        "transformer/lm/pretrained/save.py",
        (
            (
                "reference = dict(build_lm(config).named_parameters())",
                "reference = dict(build_lm(config).named_parameters(remove_duplicate=False))",
            ),
            (
                "params = dict(model.named_parameters())",
                "params = dict(model.named_parameters(remove_duplicate=False))",
            ),
        ),
        "The tied head is no longer written once as the embedding: save_pretrained of any tied model (GPT-2, "
        "StarCoder2, a tied Llama) fails with safetensors' shared-tensor RuntimeError instead of writing a folder.",
    ),
    Mutant(
        "blind-pretrained-save-architecture-ignored",
        "transformer/lm/model.py",
        (
            (
                'return _folder_io("save")(self, path, architecture=architecture)',
                'return _folder_io("save")(self, path)',
            ),
        ),
        "TransformerLM.save_pretrained(path, architecture=...) ignores the architecture named: a model loaded as "
        "Llama and saved with architecture='MistralForCausalLM' is written as LlamaForCausalLM.",
    ),
    Mutant(
        "blind-pretrained-tokenizer-addedtoken-dict",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                '            if isinstance(token, dict):\n                token = token.get("content")\n',
                "",
            ),
        ),
        "A tokenizer_config.json whose special tokens are AddedToken objects ({'content': '</s>', ...}, as older "
        "Llama folders write them) is refused by PretrainedTokenizer.from_folder instead of read.",
    ),
]

# Run against the test files of the code reviewed (the before rate: on commit d9405e7, before the tests the
# review prompted).
_TESTS = (
    "tests/test_pretrained_folders.py",
    "tests/test_pretrained_config.py",
    "tests/test_pretrained_parity.py",
    "tests/test_pretrained_generation.py",
    "tests/test_pretrained_memory.py",
    "tests/test_cli_pretrained.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
