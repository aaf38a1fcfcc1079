"""A batch of conversations through ``PretrainedTokenizer.apply_chat_template`` (texts, padded ids and masks, both
sides, ``return_dict``, tensors) and ``continue_final_message`` (a prefilled answer left open; refused with
``add_generation_prompt``), each against transformers' own ``apply_chat_template`` on the same folder: the Llama 3
shape (its template trims the content: the continued text loses its trailing space), ChatML (a default system
message, spacing kept) and a template of indented block tags, conversations with and without a system message and
of different lengths, so that the padding matters."""

from __future__ import annotations

import pytest
import torch
from chat_helpers import BLOCKS, CHATML, LLAMA3, PAD, chat_folder

from transformer.lm.pretrained import PretrainedTokenizer
from transformer.lm.pretrained.chat_template import ChatTemplateError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

SYSTEM = {"role": "system", "content": "Answer in one word; naïve café."}
USER = {"role": "user", "content": "  héllo, what is the cat? 🙂 "}
#: Conversations of different lengths, with and without a system message, the last two ending with a prefill.
BATCH = [
    [USER],
    [SYSTEM, USER, {"role": "assistant", "content": "the mat"}, {"role": "user", "content": "and the dog?"}],
    [SYSTEM, USER, {"role": "assistant", "content": "the cat sat on "}],
    [USER, {"role": "assistant", "content": "we will"}],
]
TEMPLATES = {"llama3": LLAMA3, "chatml": CHATML, "blocks": BLOCKS}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat_batches")
    return {name: chat_folder(root / name, template) for name, template in TEMPLATES.items()}


def _pair(folder, side="right"):
    return transformers.AutoTokenizer.from_pretrained(folder, padding_side=side), PretrainedTokenizer.from_folder(
        folder
    )


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_a_batch_renders_each_conversation_as_transformers(folders, template, add_generation_prompt):
    theirs, ours = _pair(folders[template])
    texts = ours.apply_chat_template(BATCH, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert texts == theirs.apply_chat_template(BATCH, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert texts == [
        ours.apply_chat_template(c, add_generation_prompt=add_generation_prompt, tokenize=False) for c in BATCH
    ]
    assert len(set(texts)) == len(BATCH)
    ids = ours.apply_chat_template(BATCH, add_generation_prompt=add_generation_prompt)
    assert ids == theirs.apply_chat_template(BATCH, add_generation_prompt=add_generation_prompt, return_dict=False)
    assert len({len(row) for row in ids}) == len(BATCH)  # unpadded: each its own length


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_ids_and_masks_equal_transformers_on_both_sides(folders, template, side):
    theirs, ours = _pair(folders[template], side)
    expected = theirs.apply_chat_template(BATCH, add_generation_prompt=True, padding=True, return_tensors="pt")
    got = ours.apply_chat_template(
        BATCH, add_generation_prompt=True, padding=True, padding_side=side, return_tensors="pt", return_dict=True
    )
    assert set(got) == {"input_ids", "attention_mask"}
    assert torch.equal(got["input_ids"], expected["input_ids"])
    assert torch.equal(got["attention_mask"], expected["attention_mask"])
    mask = got["attention_mask"]
    assert (mask == 0).any() and bool((got["input_ids"][mask == 0] == PAD).all())  # the padding matters
    assert bool((mask[:, 0 if side == "right" else -1] == 1).all())  # pads on the side asked
    lists = ours.apply_chat_template(BATCH, add_generation_prompt=True, padding=True, padding_side=side)
    assert lists == expected["input_ids"].tolist()  # return_dict=False: the ids alone, lists without return_tensors
    dicts = ours.apply_chat_template(
        BATCH, add_generation_prompt=True, padding=True, padding_side=side, return_dict=True
    )
    assert dicts == {k: v.tolist() for k, v in expected.items()}
    one = ours.apply_chat_template(BATCH[1], return_dict=True)  # one conversation: one row, as transformers
    assert one == dict(theirs.apply_chat_template(BATCH[1]))


def test_a_batch_without_padding_makes_no_tensor(folders):
    ours = PretrainedTokenizer.from_folder(folders["chatml"])
    with pytest.raises(ValueError, match=r"make no tensor without padding; pass padding=True"):
        ours.apply_chat_template(BATCH, return_tensors="pt")
    with pytest.raises(ValueError, match=r"padding_side must be 'left' or 'right', got 'middle'"):
        ours.apply_chat_template(BATCH, padding=True, padding_side="middle")
    with pytest.raises(ChatTemplateError, match=r"messages must be a non-empty list"):
        ours.apply_chat_template([[USER], []])


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_continue_final_message_leaves_the_last_message_open_as_transformers(folders, template):
    theirs, ours = _pair(folders[template], "left")
    prefilled = BATCH[2:]
    texts = ours.apply_chat_template(prefilled, continue_final_message=True, tokenize=False)
    assert texts == theirs.apply_chat_template(prefilled, continue_final_message=True, tokenize=False)
    closed = ours.apply_chat_template(prefilled, tokenize=False)
    for text, whole, conversation in zip(texts, closed, prefilled, strict=True):
        answer = conversation[-1]["content"]
        assert text != whole and whole.startswith(text)  # the end of the turn is cut off
        assert text.endswith(answer.strip() if template == "llama3" else answer)  # Llama 3's template trims
    got = ours.apply_chat_template(
        prefilled, continue_final_message=True, padding=True, padding_side="left", return_tensors="pt", return_dict=True
    )
    expected = theirs.apply_chat_template(prefilled, continue_final_message=True, padding=True, return_tensors="pt")
    assert torch.equal(got["input_ids"], expected["input_ids"])
    assert torch.equal(got["attention_mask"], expected["attention_mask"])


def test_continue_final_message_in_a_list_of_content_blocks_as_transformers(tmp_path):
    blocks = (
        "{% for m in messages %}{{ m['role'] }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
        "{% for b in m['content'] %}{{ b['text'] }}|{% endfor %}{% endif %}<|eot|>{% endfor %}"
    )
    theirs, ours = _pair(chat_folder(tmp_path / "blocks", blocks))
    chat = [USER, {"role": "assistant", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b "}]}]
    text = ours.apply_chat_template(chat, continue_final_message=True, tokenize=False)
    assert text == theirs.apply_chat_template(chat, continue_final_message=True, tokenize=False)
    assert text.endswith("assistant: a |b ")
    assert chat[-1]["content"][-1]["text"] == "b "  # the caller's message is left as it was


def test_continue_final_message_is_refused_where_transformers_refuses_it(folders):
    theirs, ours = _pair(folders["llama3"])
    with pytest.raises(ValueError, match="not compatible"):
        theirs.apply_chat_template(BATCH[2], continue_final_message=True, add_generation_prompt=True)
    with pytest.raises(ChatTemplateError, match=r"continue_final_message and add_generation_prompt are not compatible"):
        ours.apply_chat_template(BATCH[2], continue_final_message=True, add_generation_prompt=True)
    deleting = "{% for m in messages %}{{ m['role'] }}<|eot|>{% endfor %}"  # writes no content
    with pytest.raises(ChatTemplateError, match=r"final message does not appear in the rendered chat"):
        ours.apply_chat_template(BATCH[2], continue_final_message=True, chat_template=deleting)
    with pytest.raises(TypeError, match=r"continue_final_message must be a bool, got 'yes'"):
        ours.apply_chat_template(BATCH[2], continue_final_message="yes")


def test_a_batch_of_tuples_or_a_tuple_of_conversations_is_a_batch_as_transformers(folders):
    """A batch is a list or tuple whose first item is a list or tuple (transformers' test): tuples of messages and a
    tuple of conversations render as the list batch does, texts and ids, with transformers agreeing."""
    theirs, ours = _pair(folders["chatml"])
    want = ours.apply_chat_template(BATCH, add_generation_prompt=True, tokenize=False)
    for batch in ([tuple(c) for c in BATCH], tuple(BATCH), tuple(tuple(c) for c in BATCH)):
        texts = ours.apply_chat_template(batch, add_generation_prompt=True, tokenize=False)
        assert texts == want == theirs.apply_chat_template(batch, add_generation_prompt=True, tokenize=False)
        ids = ours.apply_chat_template(batch, add_generation_prompt=True)
        assert ids == theirs.apply_chat_template(batch, add_generation_prompt=True, return_dict=False)
