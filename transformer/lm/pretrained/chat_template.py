"""Chat templates: a checkpoint folder's jinja template turned into the prompt text, as transformers'
``tokenizer.apply_chat_template`` renders it (``transformers/utils/chat_template_utils.py``).

Where the template comes from is transformers' ``from_pretrained``'s rule: the file ``chat_template.jinja`` (what
transformers 5 writes), plus one file per named template in ``additional_chat_templates/``, takes priority over the
``chat_template`` field of ``tokenizer_config.json`` (a string, or a list of ``{"name", "template"}``). With several
templates, ``chat_template=NAME`` picks one; without it, ``tool_use`` when there are ``tools``, else ``default``.

The environment is transformers': jinja2's sandboxed, immutable environment with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension (``{% break %}``), a ``tojson`` filter that writes JSON as Python's
``json.dumps`` (non-ASCII kept, no HTML escaping; ``indent``, ``separators``, ``sort_keys``), ``raise_exception``
(a template's own refusal: :class:`ChatTemplateError` with the template's message), ``strftime_now(format)``, and
as variables ``messages``, ``tools``, ``documents``, ``add_generation_prompt``, the tokenizer's special tokens
(``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``, as strings) and any extra keyword (which overrides a
special token, as in transformers). The ``{% generation %}`` block (transformers' assistant-mask tracker) renders
its body. jinja2 is imported when a template is first rendered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import PretrainedFormatError

__all__ = ["ChatTemplateError", "CHAT_TEMPLATE_FILE", "CHAT_TEMPLATE_DIR", "read_chat_templates", "render_chat"]

CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"


class ChatTemplateError(ValueError):
    """A conversation the template refuses (its ``raise_exception``), a template jinja2 cannot parse, or a folder
    without a template."""


def read_chat_templates(folder: Path, settings: Mapping[str, Any]) -> str | dict[str, str] | None:
    """The folder's chat template (one string), or its named templates ({name: template}), or None without any:
    ``chat_template.jinja`` and ``additional_chat_templates/*.jinja`` first, else ``settings["chat_template"]``
    (``tokenizer_config.json``'s)."""
    templates = {}
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        templates["default"] = (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    if (folder / CHAT_TEMPLATE_DIR).is_dir():
        for file in sorted((folder / CHAT_TEMPLATE_DIR).glob("*.jinja")):
            templates[file.stem] = file.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    field = settings.get("chat_template")
    if field is None or isinstance(field, str):
        return field
    if isinstance(field, list) and all(isinstance(t, dict) and {"name", "template"} <= set(t) for t in field):
        return {t["name"]: t["template"] for t in field}
    raise PretrainedFormatError(
        f"{folder / 'tokenizer_config.json'}: field chat_template must be a string or a list of "
        f'{{"name": ..., "template": ...}}, got {type(field).__name__}'
    )


def choose_template(templates: str | dict[str, str] | None, chat_template: str | None, tools: object, where: str):
    """The template text to render: ``chat_template`` itself (a template) or by name, else the folder's (``tool_use``
    with tools, else ``default``); a :class:`ChatTemplateError` naming the folder when there is none."""
    if isinstance(templates, dict):
        if chat_template is not None and chat_template in templates:
            return templates[chat_template]
        if chat_template is None:
            if tools is not None and "tool_use" in templates:
                return templates["tool_use"]
            if "default" in templates:
                return templates["default"]
            raise ChatTemplateError(
                f"{where} has several chat templates and none named 'default': pass chat_template= one of "
                f"{sorted(templates)}"
            )
    if chat_template is not None:
        return chat_template
    if templates is None:
        raise ChatTemplateError(
            f"{where} has no chat template (no chat_template.jinja, no chat_template field in "
            "tokenizer_config.json): it is not a chat model's folder; pass chat_template= a jinja template, or "
            "encode the prompt text yourself"
        )
    return templates


def render_chat(
    template: str, messages: Sequence[Mapping[str, Any]], *, continue_final_message: bool = False, **variables: Any
) -> str:
    """``template`` rendered for ``messages`` (each a mapping with ``role`` and ``content``) with ``variables``
    (``add_generation_prompt``, ``tools``, ``documents``, the special tokens, extra keywords), as transformers
    renders it; messages' keys whose value is None are dropped first, as transformers does.

    ``continue_final_message=True`` leaves the last message open (transformers' rule, ``render_jinja_template``):
    a tag is appended to its content (to its last text block when the content is a list), and the text is cut at
    the tag (and its trailing space trimmed where the template trimmed the content), so no end-of-turn follows it."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ChatTemplateError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r:.80}"
        )
    chat = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be a dict with 'role' and 'content', got {message!r:.80}")
        chat.append({key: _plain(value) for key, value in message.items() if value is not None})
    if not isinstance(continue_final_message, bool):
        raise TypeError(f"continue_final_message must be a bool, got {continue_final_message!r}")
    if continue_final_message and variables.get("add_generation_prompt"):
        raise ChatTemplateError(
            "continue_final_message and add_generation_prompt are not compatible (as in transformers): "
            "continue_final_message continues the last message, add_generation_prompt opens a new assistant turn; "
            "pass one of them"
        )
    final = _open_final_message(chat) if continue_final_message else None
    jinja2 = _jinja2()
    compiled = _compile(template)
    try:
        text = compiled.render(messages=chat, **{key: _plain(value) for key, value in variables.items()})
    except jinja2.exceptions.TemplateError as error:
        raise ChatTemplateError(f"the chat template refused the conversation: {error}") from None
    return text if final is None else _cut_at_tag(text, final)


#: What transformers appends to the message to continue, to find where it ends in the rendered text.
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


def _open_final_message(chat: list[dict[str, Any]]) -> str:
    """The text of the last message (its last text block for a list of blocks), the tag appended to it in ``chat``."""
    last = chat[-1]
    content = last.get("content")
    if content is None:
        raise ChatTemplateError('continue_final_message is set but the final message has no "content" to continue')
    if isinstance(content, (list, tuple)):
        blocks = [dict(block) if isinstance(block, Mapping) else block for block in content]
        for block in reversed(blocks):
            if isinstance(block, dict) and "text" in block:
                final, block["text"] = block["text"], f"{block['text']}{CONTINUE_TAG}"
                last["content"] = blocks
                return final
        raise ChatTemplateError("continue_final_message is set but the final message has no text block to continue")
    final = str(content)
    last["content"] = f"{final}{CONTINUE_TAG}"
    return final


def _cut_at_tag(text: str, final: str) -> str:
    """``text`` up to the tag (transformers' cut: without the trailing space the template trimmed)."""
    tag = CONTINUE_TAG.strip()
    if final.strip() not in text or tag not in text:
        raise ChatTemplateError(
            "continue_final_message is set but the final message does not appear in the rendered chat (the template "
            f"deletes part of it): final message {final.strip()!r:.80}"
        )
    at = text.rindex(tag)
    return text[:at] if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG else text[:at].rstrip()


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types (transformers' ``_plain_template_data``, short of its numpy, dataclass
    and pydantic cases): what the sandbox lets a template see."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    for kind in (str, bool, int, float):
        if isinstance(value, kind):
            return kind(value)
    return f"<{type(value).__name__}>"


def _jinja2():
    """jinja2, imported on first use (transformers' own templates need it too), or one clear ImportError."""
    try:
        import jinja2
    except ImportError:
        raise ImportError(
            'chat templates need jinja2 (transformers renders them with it): pip install "jinja2>=3.1.6" '
            "(part of the hf extra)"
        ) from None
    return jinja2


@lru_cache(maxsize=16)
def _compile(template: str):
    """The jinja2 template of ``template`` in transformers' environment (see the module's docstring)."""
    jinja2 = _jinja2()
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: its body, as transformers renders it without a mask."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(f"the chat template is not valid jinja (line {error.lineno}): {error}") from None
