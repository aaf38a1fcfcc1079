"""Loading a Hugging Face folder imports no compiler (issue 43): ``torch.cat`` on meta tensors, which the shape check
of a fused GPT-2 tensor used, runs a Python meta kernel that imports ``torch._dynamo`` (0.8 s, 150 MiB); the shapes
are now computed from the sizes (``TensorMap.their_shape``), checked here against ``to_theirs`` on meta tensors."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pretrained_helpers import hf_model

from transformer.lm.pretrained.tensor_map import TensorMap

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch._dynamo", "torch._inductor")


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_their_shape_is_to_theirs_shape_on_meta_tensors_for_every_layout():
    """The oracle: torch's own layout of meta tensors; a combination torch refuses is refused (ValueError)."""
    sizes = [(6, 4), (4,), (1, 5, 3), (1, 7), (5,), (6, 5), (4, 6)]
    cases = 0
    for layout, k in [("same", 1), ("transposed", 1), ("batched", 1), ("fused", 2), ("fused", 3), ("stacked", 2)]:
        for shapes in itertools.product(sizes, repeat=k):
            m = TensorMap("w", tuple(f"p{i}" for i in range(k)), layout)
            try:
                want = tuple(m.to_theirs(tuple(torch.empty(s, device="meta") for s in shapes)).shape)
            except RuntimeError:
                with pytest.raises(ValueError, match=r"TensorMap w: "):
                    m.their_shape(tuple(torch.Size(s) for s in shapes))
            else:
                assert m.their_shape(tuple(torch.Size(s) for s in shapes)) == want, (layout, shapes)
            cases += 1
    assert cases == 7 + 7 + 7 + 49 + 343 + 49


def test_their_shape_imports_no_compiler():
    """In a fresh process with the module alone (the package's own import is another matter): the fused, stacked and
    transposed layouts of GPT-2 and Phi-3 leave torch._dynamo unimported; torch.cat on meta tensors did not."""
    spec = importlib.util.find_spec("transformer.lm.pretrained.tensor_map")
    code = (
        "import importlib.util, json, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('tensor_map', {spec.origin!r})\n"
        "tm = sys.modules['tensor_map'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(tm)\n"
        "fused = tm.TensorMap('c_attn.weight', ('q', 'k', 'v'), 'fused')\n"
        "stacked = tm.TensorMap('qkv_proj.weight', ('q', 'k', 'v'), 'stacked')\n"
        "shapes = [fused.their_shape((torch.Size([8, 8]),) * 3), fused.their_shape((torch.Size([8]),) * 3),\n"
        "          stacked.their_shape((torch.Size([8, 8]), torch.Size([4, 8]), torch.Size([4, 8]))),\n"
        "          tm.TensorMap('w', ('w',), 'transposed').their_shape((torch.Size([3, 8]),))]\n"
        f"print(json.dumps([shapes, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    shapes, heavy = json.loads(_fresh(code))
    assert shapes == [[8, 24], [24], [16, 8], [8, 3]] and heavy == []


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_loading_a_folder_and_one_checked_forward_import_no_compiler(kind, tmp_path):
    """A fresh process loads the folder and runs one forward with the checks on; its logits are transformers'."""
    import transformers

    theirs = hf_model(transformers, kind)
    theirs.save_pretrained(tmp_path / kind)
    tokens = torch.randint(3, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    code = (
        "import json, sys, torch, transformer as T\n"
        f"heavy = {HEAVY!r}\n"
        "seen = {'import': [m for m in heavy if m in sys.modules]}\n"
        f"model = T.TransformerLM.from_pretrained({str(tmp_path / kind)!r})\n"
        "seen['load'] = [m for m in heavy if m in sys.modules]\n"
        "assert T.checks_enabled()\n"
        f"logits = model.logits(torch.tensor({tokens.tolist()!r}))\n"
        "seen['forward'] = [m for m in heavy if m in sys.modules]\n"
        "print(json.dumps({'seen': seen, 'logits': logits.tolist()}))\n"
    )
    out = json.loads(_fresh(code))
    with torch.no_grad():
        torch.testing.assert_close(torch.tensor(out["logits"]), theirs(input_ids=tokens).logits, rtol=1e-4, atol=1e-4)
    # strict on every torch (2.9-2.14) and einops the package takes: the forward calls no einops (0.8.0 imports
    # torch._dynamo at its first call on a torch tensor)
    assert out["seen"] == {"import": [], "load": [], "forward": []}


@pytest.mark.parametrize(
    "fields",
    [
        dict(norm="rms", qk_norm=True, qk_norm_scope="projection", pre_sublayer_norm=False, post_sublayer_norm=True),
        dict(value_projection="per_head"),
    ],
    ids=["olmo2-blocks", "per-head-values"],
)
def test_the_blocks_that_joined_heads_with_einops_import_no_compiler_either(fields):
    """OLMo's QK-norm over the whole projection and the per-head value form join and split heads: a fresh process
    builds such a model and runs checked forwards (the eager and the torch backend) without importing a compiler."""
    base = dict(vocab=29, n_layers=2, d_model=16, d_ff=24, n_heads=4, positional_encoding="rotary", max_len=32)
    code = (
        "import json, sys, torch, transformer as T\n"
        "from transformer.lm import LMConfig, build_lm\n"
        f"model = build_lm(LMConfig(**{ {**base, **fields}!r})).eval()\n"
        "tokens = torch.randint(1, 29, (2, 7))\n"
        "with torch.no_grad():\n"
        "    for backend in ('eager', 'torch'):\n"
        "        with T.use_backend(backend):\n"
        "            model.logits(tokens)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    assert json.loads(_fresh(code)) == []
