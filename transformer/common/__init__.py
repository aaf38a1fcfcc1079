"""Idioms the package's concepts share, written once: output directories and write failures, the run-time switches,
argument validators, version parsing, dtype names and optional dependencies. Nothing here knows about the
Transformer."""
