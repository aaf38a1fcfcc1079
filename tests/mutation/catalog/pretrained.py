"""Mutants of the Hugging Face checkpoint folders (docs/pretrained.md): the config mapping, the tensor layouts, the
checks before reading, the block-by-block reading, the tokenizer's end ids.

Each runs the test files of the package (``tests=``): the folders' errors, the config mapping, the parity with
transformers, generation and the tokenizer, the memory benchmark.
"""

from .base import Mutant

PRETRAINED_TESTS = (
    "tests/test_pretrained_config.py",
    "tests/test_pretrained_folders.py",
    "tests/test_pretrained_parity.py",
    "tests/test_pretrained_generation.py",
    "tests/test_pretrained_token_ids.py",
)  # not test_pretrained_memory.py: it runs benchmarks/, which the runner's copy lacks (its mutant, a whole tensor
# mapped at once, was run by hand: 1.48x, the test fails)


def P(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, PRETRAINED_TESTS)


_DIR = "transformer/lm/pretrained/"

MUTANTS = [
    P(
        "pretrained-phi3-gate-up-swapped",
        _DIR + "phi3.py",
        '"w_1": 0, "w_3": 1}',
        '"w_1": 1, "w_3": 0}',
        "Phi-3's gate_up_proj read as up above gate",
    ),
    P(
        "pretrained-stacked-offsets-lost",
        _DIR + "tensor_map.py",
        "                first += t.size(0)\n",
        "",
        "every tensor of a stacked one read from its first rows",
    ),
    P(
        "pretrained-conv1d-not-transposed",
        _DIR + "tensor_map.py",
        "            return tensors[0].t()\n",
        "            return tensors[0]\n",
        "GPT-2's Conv1D weights taken as nn.Linear's (out, in) instead of transposed",
    ),
    P(
        "pretrained-fused-qkv-reversed",
        _DIR + "tensor_map.py",
        "slice(k * width, (k + 1) * width)) for k, t in enumerate(tensors)",
        "slice(k * width, (k + 1) * width)) for k, t in enumerate(reversed(tensors))",
        "GPT-2's c_attn split as values, keys, queries",
    ),
    P(
        "pretrained-yarn-mscale-inverted",
        _DIR + "rope.py",
        "_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)",
        "_yarn_mscale(factor, mscale_all_dim) / _yarn_mscale(factor, mscale)",
        "yarn's cos/sin factor from mscale and mscale_all_dim the wrong way up",
    ),
    P(
        "pretrained-rope-theta-default",
        _DIR + "rope.py",
        'config.number("rope_theta", 10000.0)',
        'config.number("rope_theta", 1000000.0)',
        "a file without rope_theta read with another base than transformers' 10000",
    ),
    P(
        "pretrained-original-max-nested-wins",
        _DIR + "rope.py",
        """        original = config.integer(
            "original_max_position_embeddings",
            rope.integer("original_max_position_embeddings", config.integer("max_position_embeddings")),
        )""",
        """        original = rope.integer(
            "original_max_position_embeddings",
            config.integer("original_max_position_embeddings", config.integer("max_position_embeddings")),
        )""",
        "the nested original_max_position_embeddings wins over the top-level one (transformers reads the top first)",
    ),
    P(
        "pretrained-mistral-window-dropped",
        _DIR + "llama.py",
        '        return config.integer("sliding_window", 4096, optional=True)\n',
        "        return None\n",
        "Mistral's sliding window ignored: every key attended",
    ),
    P(
        "pretrained-gpt2-always-scaled",
        _DIR + "gpt2.py",
        'attention_scale=None if config.flag("scale_attn_weights", True) else 1.0,',
        "attention_scale=None,",
        "GPT-2's scale_attn_weights=false read as the usual 1/sqrt(d_k)",
    ),
    P(
        "pretrained-block-rows-from-zero",
        _DIR + "load.py",
        "view[low - first : high - first].copy_(",
        "view[low - start : high - start].copy_(",
        "every block of rows copied to the top of the tensor (a large tensor's later rows left as allocated)",
    ),
    P(
        "pretrained-no-unexpected-check",
        _DIR + "load.py",
        "    unexpected = sorted(n for n in present - set(wanted) if not architecture.is_derived_buffer(n))\n",
        "    unexpected = []\n",
        "tensors the model has no place for silently skipped",
    ),
    P(
        "pretrained-no-shape-check",
        _DIR + "load.py",
        "        if actual != expected:\n",
        "        if False:\n",
        "a misshaped tensor goes on to the copy (a broadcast, or torch's message without the file)",
    ),
    P(
        "pretrained-buffers-cast",
        _DIR + "load.py",
        "    model.to(device=device)  #",
        "    model.to(device=device, dtype=dtype)  #",
        "RoPE's frequencies cast to the model's dtype (bfloat16 angles, unlike transformers')",
    ),
    P(
        "pretrained-eos-from-config-first",
        _DIR + "tokenizer.py",
        "    generation = read_json(folder / GENERATION_CONFIG_FILE, required=False)\n",
        "    generation = read_json(folder / CONFIG_FILE, required=False)\n",
        "config.json's eos ids before generation_config.json's (transformers' generate reads the latter)",
    ),
    P(
        "pretrained-llama-buffers-unknown",
        _DIR + "llama.py",
        '    derived_buffers = (r"(model\\.)?layers\\.\\d+\\.self_attn\\.rotary_emb\\.inv_freq",)\n',
        "    derived_buffers = ()\n",
        "old Llama files' rotary_emb.inv_freq buffers refused as unexpected tensors",
    ),
]
