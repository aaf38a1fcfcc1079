"""Blind review of issue 30 install extras and docs links (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-i30-missing-reported-as-broken",
        "transformer/common/optional.py",
        (
            (
                'missing = error.name == package or (error.name or "").startswith(f"{package}.")',
                'missing = (error.name or "").startswith(f"{package}.")',
            ),
        ),
        "A package that is simply not installed is reported as 'installed but cannot be imported (...)' instead of "
        "'which is not installed': the missing case is no longer told apart from a broken install.",
    ),
    Mutant(
        "blind-i30-install-command-adds-core-requirements",
        "transformer/common/optional.py",
        (
            (
                """marker = re.compile(rf\"\"\"^(?P<requirement>[^;]+);\\s*extra\\s*==\\s*["']{re.escape(extra)}["']\\s*$\"\"\")""",
                """marker = re.compile(rf\"\"\"^(?P<requirement>[^;]+)(?:;\\s*extra\\s*==\\s*["']{re.escape(extra)}["'])?\\s*$\"\"\")""",
            ),
        ),
        "The extra's marker becomes optional, so the pip command printed for a missing [text] package also names "
        'every core requirement ("torch>=2.4" ...), not just the extra\'s own tokenizers and sacrebleu.',
    ),
    Mutant(
        "blind-i30-require-accepts-any-package",
        "transformer/common/optional.py",
        (
            (
                "    if package not in EXTRAS:\n"
                "        raise ValueError(f\"package must be one of {', '.join(sorted(EXTRAS))}, got {package!r}\")\n",
                "",
            ),
        ),
        "require() no longer refuses a package that belongs to no extra: require('numpy', ...) returns numpy instead "
        "of raising ValueError (and a missing unknown package gives a KeyError).",
    ),
    Mutant(
        "blind-i30-cli-missing-package-traceback",
        "transformer/cli/__init__.py",
        (
            (
                "except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError, MissingDependencyError) as error:",
                "except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError) as error:",
            ),
        ),
        "`typed-transformer train lm` without tokenizers ends in a MissingDependencyError traceback (exit 1) instead "
        "of the one-line error with exit status 2.",
    ),
    Mutant(
        "blind-i30-translate-skips-early-sacrebleu-check",
        "transformer/cli/train_files.py",
        (
            (
                '    require("tokenizers", f"train {args.task}")\n'
                '    if args.task == "translate":\n'
                '        require("sacrebleu", BLEU_FEATURE)\n',
                '    require("tokenizers", f"train {args.task}")\n',
            ),
        ),
        "`train translate` without sacrebleu no longer stops at once with exit 2: it reads the data and trains, and "
        "fails only when it scores BLEU after training.",
    ),
    Mutant(
        "blind-i30-pretrained-tokenizer-plain-import-error",
        "transformer/lm/pretrained/tokenizer.py",
        (('        require("tokenizers", f"reading the tokenizer of {path}")\n', ""),),
        "Reading a pretrained folder's tokenizer.json without tokenizers raises a bare ModuleNotFoundError, not "
        "MissingDependencyError naming the [text] extra and the pip command (`generate --model` shows a traceback).",
    ),
    Mutant(
        "blind-i30-sacrebleu-left-in-core",
        "pyproject.toml",
        (
            ('    "tqdm>=4.60",\n]', '    "tqdm>=4.60",\n    "sacrebleu>=2.3",  # BLEU and chrF of translations\n]'),
            ('text = [\n    "tokenizers>=0.15",\n    "sacrebleu>=2.3",\n]', 'text = [\n    "tokenizers>=0.15",\n]'),
        ),
        "sacrebleu is a core requirement again and no longer in the [text] extra: the core install pulls in "
        "sacrebleu (lxml, regex, ...) and the extra's pip command names tokenizers only.",
    ),
    Mutant(
        "blind-i30-core-only-check-forgets-transformers",
        "scripts/readme_setup.py",
        (
            (
                'found = [name for name in ("tokenizers", "sacrebleu", "transformers") if importlib.util.find_spec(name)]',
                'found = [name for name in ("tokenizers", "sacrebleu") if importlib.util.find_spec(name)]',
            ),
        ),
        "The fresh-main-job check of the core install no longer looks for transformers: a core install that pulls "
        "in the hf extra's transformers passes CI.",
    ),
    Mutant(
        "blind-i30-notebook-links-only-top-level-pages",
        "scripts/docs_hooks.py",
        (
            (
                'if len(match["up"]) // 3 != depth + 1:  # not the repository\'s notebooks/ folder',
                'if len(match["up"]) // 3 != 1:  # not the repository\'s notebooks/ folder',
            ),
        ),
        "A nested docs page's link to a notebook (api/lm.md: ../../notebooks/NAME.ipynb) is left as it is, so on "
        "the site it is broken; only top-level pages' links lead to the tutorial page.",
    ),
    Mutant(
        "blind-i30-interpreter-reason-cached-while-compiling",
        "kernels/_validate.py",
        (
            (
                "    return _old_interpreter_reason()\n",
                "    return functools.lru_cache(maxsize=1)(_ask_old_interpreter)()\n",
            ),
        ),
        "Under the Triton CPU interpreter, torch.compile (fullgraph=True) tracing the triton backend calls the "
        "interpreter's reason through an lru_cache (as before 2026-12-01, when it was one): Dynamo warns 'detected a call to a functools.lru_cache-wrapped "
        "function at _validate.py', though the drop-in promises no warning from our code.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 9/10: on commit 08a90b9, before the tests the
# review prompted; run by applying each mutant in a worktree, since the runner then copied no scripts/).
_TESTS = (
    "tests/test_optional_dependencies.py",
    "tests/test_docs_links.py",
    "tests/test_packaging.py",
    "tests/test_readme.py",
    "tests/test_triton_backend.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
