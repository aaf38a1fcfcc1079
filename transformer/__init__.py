"""The Transformer of "Attention Is All You Need" as shape-checked PyTorch modules."""
