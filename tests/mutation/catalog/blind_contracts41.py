"""Blind review of issue 41's run-time contracts (2026-12-02), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-c41-traced-min-max-swapped",
        "transformer/contracts/traced_rules.py",
        (
            (
                '(min(values) if tree[1] == "min" else max(values))',
                '(max(values) if tree[1] == "min" else min(values))',
            ),
        ),
        "The traced checker evaluates min(...) as max and max(...) as min (the eager fast path emits the builtins "
        'and stays right): under torch.compile `Float[Tensor, "a b min(a,b)"]` with a=2, b=5 rejects a valid '
        "last axis of 2 and accepts 5, where jaxtyping (and eager) decide the opposite; docs/contracts.md promises "
        "min, max and abs in sizes read as jaxtyping's eval reads them.",
    ),
    Mutant(
        "blind-c41-float-constant-unread",
        "transformer/contracts/grammar.py",
        (
            (
                "if isinstance(node, ast.Constant) and type(node.value) in (int, float):",
                "if isinstance(node, ast.Constant) and type(node.value) is int:",
            ),
        ),
        'Float constants in a size ("2.0", "n*1.5") are no longer read by the grammar: the contract becomes '
        'unsupported, so under torch.compile(fullgraph=True) a valid call of `Float[Tensor, "n 2.0"]` is refused '
        "with Unsupported (the eager fallback) instead of compiling into one graph; docs list float constants "
        "(jaxtyping compares 2 == 2.0) among what the traced checker reads.",
    ),
    Mutant(
        "blind-c41-sequence-class-unchecked",
        "transformer/contracts/traced_rules.py",
        (
            (
                '    if kind == "items_of":  # Sequence[X]: an instance of the class, every item an X\n'
                "        if not isinstance(value, contract.classes[hint[1]]):\n"
                "            return False\n",
                '    if kind == "items_of":  # Sequence[X]: an instance of the class, every item an X\n',
            ),
        ),
        "Sequence[X] / Iterable[X] under compile checks the items but no longer the container's class: a set "
        "{1, 2} or a dict {1: 2} passed for `Sequence[int]` is accepted compiled, where beartype rejects it "
        "(not a Sequence) eagerly: a false accept against 'the container's class, then every item'.",
    ),
    Mutant(
        "blind-c41-parametrised-callable-unread",
        "transformer/contracts/grammar.py",
        (
            (
                "    if origin is collections.abc.Callable or annotation is collections.abc.Callable or annotation is "
                'typing.Callable:\n        return ("callable",)',
                "    if annotation is collections.abc.Callable or annotation is typing.Callable:\n"
                '        return ("callable",)',
            ),
        ),
        "Only a bare Callable is read by the traced checker; `Callable[[Tensor], Tensor]` (origin "
        "collections.abc.Callable) falls through to UnsupportedAnnotation, so under torch.compile(fullgraph=True) a "
        "valid call passing a function is refused (Unsupported: the eager fallback) though docs say Callable[...] "
        "is read (callable, as beartype checks it) and compiles into one graph.",
    ),
    Mutant(
        "blind-c41-varargs-first-item-skipped",
        "transformer/contracts/traced_rules.py",
        (
            (
                "            bound[name] = given[name] = args[position:]\n",
                "            bound[name] = given[name] = args[position + 1 :]\n",
            ),
        ),
        "Off by one in the traced binding of *args: the items start one past the parameter's position, so the "
        'first *args item is never checked under compile: `f(*xs: Float[Tensor, "n"])` called with a wrong-rank '
        "or wrong-dtype first tensor passes compiled while beartype (every item checked here, per docs) rejects "
        "it eagerly.",
    ),
    Mutant(
        "blind-c41-fast-negative-field-in-expression",
        "transformer/contracts/fast.py",
        (
            (
                "src.emit(f\"if type({value}) is not int{'' if alone else f' or {value} < 0'}: raise _Miss\")",
                'src.emit(f"if type({value}) is not int: raise _Miss")',
            ),
        ),
        "The eager fast path evaluates a negative int field inside an expression itself instead of handing it to "
        "jaxtyping, which writes the value into the text: `{self.n}**2` with n = -3 is -3**2 = -9 to jaxtyping "
        "(never a size, a violation) but 9 here, so an axis of size 9 is accepted eagerly (false accept; docs: "
        "fields are evaluated as jaxtyping evaluates their text).",
    ),
    Mutant(
        "blind-c41-unsupported-dropped-beside-readable",
        "transformer/contracts/traced.py",
        (
            (
                "    if eager is not None and unsupported:  # an annotation the traced checker cannot read: never dropped\n",
                "    if eager is not None and unsupported and not checks:  # nothing the traced checker can read\n",
            ),
        ),
        "A contract with one annotation the traced checker cannot read (`?name`, `Float[np.ndarray, ...]`, a "
        "generic it does not know) beside readable ones is traced, the unreadable argument silently unchecked: "
        "compiled, a wrong value for that argument passes where jaxtyping rejects it; docs promise such "
        "annotations are never dropped but checked eagerly (a graph break / fullgraph refusal).",
    ),
    Mutant(
        "blind-c41-unbound-symbolic-not-annotation-error",
        "transformer/contracts/traced_rules.py",
        (
            (
                "            if value is None:  # jaxtyping's AnnotationError (its text), raised while the call is traced\n"
                "                raise_annotation_error(\n",
                "            if value is None:  # a name not bound yet: the size cannot match\n"
                "                return False\n"
                "                raise_annotation_error(\n",
            ),
        ),
        'A symbolic size naming a dimension no earlier argument bound (`x: Float[Tensor, "n+1"]` first) is '
        "treated as a mismatch under compile: a CompiledContractError (TypeCheckError) with a violation line "
        "instead of jaxtyping's AnnotationError 'Cannot process symbolic axis ...' (CompiledAnnotationError) that "
        "eager raises and docs promise.",
    ),
    Mutant(
        "blind-c41-leading-variadic-anon-rank",
        "transformer/contracts/fast.py",
        (
            (
                '        if i or not top or any(d[0] == "anon" for d in dims[i + 1 :]):\n',
                "        if i or not top:\n",
            ),
        ),
        "The eager fast path drops the rank check of a leading variadic followed only by anonymous axes: "
        "`Float[Tensor, \"*batch _\"]` (at the top level) accepts a 0-d tensor, since '_' reads no size and "
        "nothing indexes the shape; jaxtyping rejects it (rank 0 < 1): a false accept eagerly.",
    ),
    Mutant(
        "blind-c41-symint-stands-for-float",
        "transformer/contracts/traced_rules.py",
        (
            (
                "_SYMBOLIC = {torch.SymInt: int, torch.SymFloat: float,",
                "_SYMBOLIC = {torch.SymInt: float, torch.SymFloat: float,",
            ),
        ),
        "A symbolic size (SymInt) is taken for a float: under dynamic=True (or non-strict export) an int argument "
        "or an `-> int` return of x.shape[0] no longer fits `int` (false reject, where eager's real int passes) "
        "and fits `float` (false accept, where beartype rejects an int for float).",
    ),
]

# Run against the contracts' own suites, the differential fuzzer's short budget included (before/after rates in
# tests/mutation/blind_runs/blind_contracts41_*.json and docs/guarantees.md)
_TESTS = (
    "tests/test_contracts_differential.py",
    "tests/test_contracts_fast.py",
    "tests/test_contracts_compiled.py",
    "tests/test_contracts_compiled_forms.py",
    "tests/test_contracts_compiled_containers.py",
    "tests/test_contract_edges.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
