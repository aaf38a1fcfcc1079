"""Your own data: tokenizers, text files read with clear errors, memory-mapped token stores, token-budget batches.

* :mod:`.tokenizers`: byte-level BPE and character tokenizers (Hugging Face ``tokenizers``), saved as one JSON file.
* :mod:`.text_files`: reading text and ``source<TAB>target`` / JSON-lines files; errors name the file and line.
* :mod:`.token_store`: token ids in one file on disk, memory-mapped (never a corpus of Python objects).
* :mod:`.corpora`: language-model windows and translation pairs over stores.
* :mod:`.token_batches`: batches by token count with length buckets, sharded by rank, resumable.
* :mod:`.lm_batch`: the language model's batch (the protocol of :class:`~transformer.training.batch.Batch`).

Importing this package does not import ``tokenizers``; training or loading a tokenizer does (the ``text`` extra:
without it, ``MissingDependencyError`` names the pip command).
"""

from .corpora import CorpusReport, PairDataset, TextWindows, build_pair_stores, build_text_store
from .lm_batch import LMBatch
from .text_files import ReadReport, TextFileError, read_lines, read_pairs, read_text
from .token_batches import ResumableBatches, TokenBudgetPlan, token_budget_batches
from .token_store import TokenStore, TokenStoreWriter, write_token_store
from .tokenizers import TextTokenizer, TokenizerMismatchError, load_tokenizer, train_tokenizer

__all__ = [
    "CorpusReport",
    "PairDataset",
    "TextWindows",
    "build_pair_stores",
    "build_text_store",
    "LMBatch",
    "ReadReport",
    "TextFileError",
    "read_lines",
    "read_pairs",
    "read_text",
    "ResumableBatches",
    "TokenBudgetPlan",
    "token_budget_batches",
    "TokenStore",
    "TokenStoreWriter",
    "write_token_store",
    "TextTokenizer",
    "TokenizerMismatchError",
    "load_tokenizer",
    "train_tokenizer",
]
