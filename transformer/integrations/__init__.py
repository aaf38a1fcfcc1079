"""Thin adapters that put typed-transformer's attention into other libraries' models (docs/integrations.md).

* :mod:`transformer.integrations.huggingface`: ``register()`` adds ``attn_implementation="typed_transformer"`` to
  Hugging Face transformers;
* :mod:`transformer.integrations.sdpa_registry`: ``register()`` adds our kernel to PyTorch's flash-attention
  provider registry (``torch.nn.attention.activate_flash_attention_impl("typed_transformer")``).

Nothing here is imported by ``import transformer``, and each module imports its library only when called.
"""
