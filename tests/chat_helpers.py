"""A chat model's folder for the chat, streaming and batch-tokenization tests: a byte-level BPE ``tokenizer.json``
trained here (``tokenizers``; its post-processor adds the start token ``<s>``, as Llama's does), chat templates
written as Llama 3's and Qwen's (ChatML) are, and a tiny random Llama from transformers' config class."""

from __future__ import annotations

import json

#: Text with characters of two, three and four UTF-8 bytes, so that the BPE writes some of them as several tokens.
TEXT = "the cat sat on the mat. héllo wörld, naïve café € 🙂 the dog will wait; we will see. " * 40
SPECIALS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|eot|>"]
PAD, BOS, EOS, IM_START, IM_END, EOT = range(6)

#: Llama 3's shape: the start token first, a header per message, the system message only when there is one.
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n\n"
    "{{ message['content'] | trim }}<|eot|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n\n{% endif %}"
)
#: Block tags on lines of their own, indented: rendered as transformers only with trim_blocks and lstrip_blocks.
BLOCKS = """{% for message in messages %}
    {% if message['role'] == 'user' %}
[U] {{ message['content'] }}
    {% else %}
[{{ message['role'] | upper }}] {{ message['content'] }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
[A] {{ eos_token }}
{% endif %}
"""
#: Qwen's ChatML: a default system message when the conversation has none, raise_exception for an unknown role,
#: tools through tojson, strftime_now.
CHATML = """{%- if tools %}
{{- '<|im_start|>system\\n' }}{% for tool in tools %}{{ tool | tojson }}{% endfor %}{{ '<|im_end|>\\n' }}
{%- endif %}
{%- if messages[0]['role'] != 'system' %}
{{- '<|im_start|>system\\nYou are helpful (' + strftime_now('%Y') + ').<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('unknown role ' + message['role']) }}
    {%- endif %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def chat_tokenizer(vocab_size: int = 320):
    """The byte-level BPE of TEXT (every byte in its alphabet), its post-processor adding ``<s>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                                        initial_alphabet=alphabet))  # fmt: skip
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    return tok


def chat_folder(folder, template: str | None = LLAMA3, *, template_file: bool = False, padding_side=None):
    """``folder`` with the tokenizer, its tokenizer_config.json (the template in its chat_template field, or in
    chat_template.jinja with ``template_file``) and generation_config.json (eos: </s> and <|eot|>)."""
    folder.mkdir(parents=True, exist_ok=True)
    chat_tokenizer().save(str(folder / "tokenizer.json"))
    settings = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if padding_side is not None:
        settings["padding_side"] = padding_side
    if template is not None and not template_file:
        settings["chat_template"] = template
    elif template is not None:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, EOT], "pad_token_id": PAD}))
    return folder


def chat_model(transformers, folder, seed: int = 0):
    """A tiny random Llama of the tokenizer's vocabulary saved into ``folder`` (transformers' model, eval mode)."""
    from pretrained_helpers import hf_model

    vocab = chat_tokenizer().get_vocab_size()
    model = hf_model(transformers, "llama", seed=seed, vocab_size=vocab, bos_token_id=BOS, eos_token_id=EOS,
                     pad_token_id=PAD, max_position_embeddings=128)  # fmt: skip
    model.save_pretrained(folder)  # writes its own generation_config.json: ours again
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, EOT], "pad_token_id": PAD}))
    return model
