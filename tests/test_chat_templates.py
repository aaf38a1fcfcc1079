"""Chat templates (``PretrainedTokenizer.apply_chat_template``) render as transformers' ``apply_chat_template``
renders them, text and ids, with and without a system message, with ``add_generation_prompt`` True and False, from
``tokenizer_config.json``'s field and from ``chat_template.jinja``; the rendered prompt carries one start token
(transformers encodes it with ``add_special_tokens=False``, and so do we); a folder without a template is refused."""

from __future__ import annotations

import pytest
from chat_helpers import BLOCKS, BOS, CHATML, LLAMA3, chat_folder

from transformer.lm.pretrained import PretrainedTokenizer
from transformer.lm.pretrained.chat_template import ChatTemplateError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

SYSTEM = {"role": "system", "content": "Answer in one word; naïve café."}
TURNS = [
    {"role": "user", "content": "  héllo, what is the cat? 🙂 "},
    {"role": "assistant", "content": "the mat"},
    {"role": "user", "content": "and the dog?"},
]
CONVERSATIONS = {"no system": TURNS, "system": [SYSTEM, *TURNS], "one turn": TURNS[:1]}


@pytest.fixture(scope="module", params=["field", "file"])
def folders(request, tmp_path_factory):
    """For each template, a folder with it in tokenizer_config.json's chat_template or in chat_template.jinja."""
    root = tmp_path_factory.mktemp(f"chat_{request.param}")
    return {
        name: chat_folder(root / name, template, template_file=request.param == "file")
        for name, template in (("llama3", LLAMA3), ("chatml", CHATML), ("blocks", BLOCKS))
    }


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("template", ["llama3", "chatml", "blocks"])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_text_and_ids_equal_transformers(folders, template, conversation, add_generation_prompt):
    folder, messages = folders[template], CONVERSATIONS[conversation]
    theirs, ours = transformers.AutoTokenizer.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)
    text = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert text == theirs.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    ids = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    expected = theirs.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, return_dict=False)
    assert ids == expected
    if template == "llama3":  # the template writes the start token; encoding adds none: one <s>, as transformers
        assert ids[:2] != [BOS, BOS] and ids[0] == BOS
        assert ours.encode(text)[:2] == [BOS, BOS]  # what a plain encode of the rendered text would give
        assert ours.encode(text, add_special_tokens=False) == expected
    opening = {"llama3": "<|im_start|>assistant\n\n", "chatml": "<|im_start|>assistant\n", "blocks": "[A] </s>\n"}
    assert text.endswith(opening[template]) is add_generation_prompt


def test_the_system_message_changes_the_prompt_as_the_template_says(folders):
    ours = PretrainedTokenizer.from_folder(folders["chatml"])
    default = ours.apply_chat_template(TURNS[:1], tokenize=False)
    given = ours.apply_chat_template([SYSTEM, TURNS[0]], tokenize=False)
    assert "You are helpful" in default and "You are helpful" not in given and SYSTEM["content"] in given


def test_tools_reach_the_template_through_tojson_as_transformers(folders):
    tools = [{"type": "function", "function": {"name": "wéather", "parameters": {"city": "<b>"}}}]
    folder = folders["chatml"]
    theirs, ours = transformers.AutoTokenizer.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)
    text = ours.apply_chat_template(TURNS[:1], tools=tools, tokenize=False)
    assert text == theirs.apply_chat_template(TURNS[:1], tools=tools, tokenize=False)
    assert '"wéather"' in text and "<b>" in text  # no ASCII escapes, no HTML escapes


def test_a_template_that_raises_is_refused_with_its_message(folders):
    ours = PretrainedTokenizer.from_folder(folders["chatml"])
    with pytest.raises(ChatTemplateError, match="the chat template refused the conversation: unknown role tool"):
        ours.apply_chat_template([{"role": "tool", "content": "x"}])
    with pytest.raises(ChatTemplateError, match=r"messages must be a non-empty list"):
        ours.apply_chat_template([])
    with pytest.raises(ChatTemplateError, match=r"messages\[0\] must be a dict"):
        ours.apply_chat_template(["hello"])


def test_a_folder_without_a_template_is_refused_clearly(tmp_path):
    ours = PretrainedTokenizer.from_folder(chat_folder(tmp_path / "plain", None))
    assert ours.chat_template is None
    with pytest.raises(ChatTemplateError, match=r"plain has no chat template .*not a chat model's folder"):
        ours.apply_chat_template(TURNS[:1])
    # a template passed in renders as transformers renders the same one
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "plain")
    assert ours.apply_chat_template(TURNS, chat_template=LLAMA3) == theirs.apply_chat_template(
        TURNS, chat_template=LLAMA3, return_dict=False
    )


def test_named_templates_choose_default_tool_use_or_the_name(tmp_path):
    folder = chat_folder(tmp_path / "named", None)
    (folder / "chat_template.jinja").write_text(LLAMA3)
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(CHATML)
    theirs, ours = transformers.AutoTokenizer.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)
    assert sorted(ours.chat_template) == ["default", "tool_use"]
    tools = [{"name": "f"}]
    for kwargs in ({}, {"tools": tools}, {"chat_template": "tool_use"}):
        assert ours.apply_chat_template(TURNS, tokenize=False, **kwargs) == theirs.apply_chat_template(
            TURNS, tokenize=False, **kwargs
        )


def test_an_extra_keyword_reaches_the_template_and_overrides_a_special_token_as_transformers(folders):
    """transformers renders with its special tokens and then the caller's keywords (a keyword wins): a given
    ``bos_token`` replaces the folder's in the text."""
    folder = folders["llama3"]
    theirs, ours = transformers.AutoTokenizer.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)
    text = ours.apply_chat_template(TURNS[:1], tokenize=False, bos_token="<given>")
    assert text == theirs.apply_chat_template(TURNS[:1], tokenize=False, bos_token="<given>")
    assert text.startswith("<given>") and not ours.apply_chat_template(TURNS[:1], tokenize=False).startswith("<given>")
