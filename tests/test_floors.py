"""The package's floors (docs/architecture.md "Floors"): every module of specworker sits on one floor and
imports only from its own floor or the floors below it. The test parses each module's imports (ast, so
imports inside functions count too) and fails on an upward import, naming the file, the line and both floors.
The same parse keeps what lies outside the package off the tests: benchmarks/, tools/ and the shared packages
(kernel_harness/, reference/) import nothing from tests/, and the numpy references import only numpy, the
standard library and each other.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specworker"
# Folders whose code runs outside pytest (or is shared with code that does): none may import tests.
NOT_TESTS = ("benchmarks", "tools", "kernel_harness", "reference")

# Floor of a module: the longest prefix of its dotted name listed here. Lower floors know nothing of higher ones.
FLOORS = {
    # 0: value types, the tokenizers and the compiled ops with what finds and builds them
    "specworker": 0,  # __init__ (the version string)
    "specworker.config": 0,
    "specworker.config_checks": 0,
    "specworker.sampling_params": 0,
    "specworker.slot_request": 0,
    "specworker.tokenizer": 0,
    "specworker.hf_tokenizer": 0,
    "specworker.json_file": 0,
    "specworker.data": 0,
    "specworker.model_executor.op_build": 0,
    "specworker.model_executor.ops": 0,
    # 1: the model side: layers, models, pre / post-process, the slot-buffer machinery
    "specworker.model_executor": 1,
    # 2: speculative decoding: samplers that verify, proposers
    "specworker.spec_decode": 2,
    # 3: the worker: input batch, model runner, scheduler, requests
    "specworker.worker": 3,
    # 4: entry points
    "specworker.llm": 4,
    "specworker.batch_run": 4,
    "specworker.bench": 4,
    "specworker.report": 4,
    "specworker.cli": 4,
    "specworker.tp_launch": 4,
    "specworker.__main__": 4,
}


def floor_of(module: str) -> int | None:
    """The floor of a dotted module name (None: not a specworker module)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in FLOORS:
            return FLOORS[prefix]
    return None


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module `path` imports; `from a import b` yields a.b as well as a, since b
    may be a submodule (a value name then finds a's floor through the prefix)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every specworker module `path` imports."""
    return [(line, name) for line, name in all_imports(path, module) if name.split(".")[0] == "specworker"]


def upward_imports(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        own = floor_of(module)
        if own is None:
            problems.append(f"{path.relative_to(package.parent)}: module {module} has no floor in FLOORS")
            continue
        for line, name in imported_modules(path, module):
            target = floor_of(name)
            if target is not None and target > own:
                problems.append(f"{path.relative_to(package.parent)}:{line}: {module} (floor {own}) imports "
                                f"{name} (floor {target}); a module may import only from its floor or below")
    return problems


def test_no_module_imports_from_a_floor_above_it():
    problems = upward_imports()
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_every_floor_holds_a_module():
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    floors = {floor_of(m) for m in modules}
    assert floors == {0, 1, 2, 3, 4}


def test_a_planted_upward_import_is_reported(tmp_path):
    """The checker sees an upward import inside a function and names the file, line and floors."""
    planted = tmp_path / "specworker"
    (planted / "model_executor").mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "model_executor" / "__init__.py").write_text("")
    (planted / "model_executor" / "planted.py").write_text(
        "import numpy\n\n\ndef f():\n    from specworker.worker.input_batch import InputBatch\n    return InputBatch\n")
    problems = upward_imports(planted)
    print("\n".join(problems))
    assert problems == [
        "specworker/model_executor/planted.py:5: specworker.model_executor.planted (floor 1) imports "
        "specworker.worker.input_batch.InputBatch (floor 3); a module may import only from its floor or below"]


@pytest.mark.parametrize("module,floor", [("specworker.model_executor.ops.state_ops", 0),
                                          ("specworker.model_executor.layers.sampler", 1),
                                          ("specworker.spec_decode.mtp_proposer", 2), ("specworker.cli", 4)])
def test_floor_of(module, floor):
    assert floor_of(module) == floor


def imports_outside(root: Path, folders: tuple[str, ...], allowed) -> list[str]:
    """`file:line: imports name` for every import in root/<folder>/**/*.py whose top-level name fails
    allowed(top)."""
    problems = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            module = module_name(path, root / folder)
            for line, name in all_imports(path, module):
                if not allowed(name.split(".")[0]):
                    problems.append(f"{path.relative_to(root)}:{line}: imports {name}")
    return problems


def _not_tests(top: str) -> bool:
    return top != "tests"


def _numpy_stdlib_or_reference(top: str) -> bool:
    return top in ("numpy", "reference") or top in sys.stdlib_module_names


def test_benchmarks_tools_and_shared_packages_import_nothing_from_tests():
    problems = imports_outside(ROOT, NOT_TESTS, _not_tests)
    assert not problems, "imports of tests/ outside it (move what both need into reference/):\n" + "\n".join(problems)


def test_references_import_only_numpy_the_standard_library_and_each_other():
    """docs/spec.md §4.6: a reference is written from the spec and never calls specworker code."""
    problems = imports_outside(ROOT, ("reference",), _numpy_stdlib_or_reference)
    assert not problems, "reference/ imports beyond numpy and the standard library:\n" + "\n".join(problems)


def test_a_planted_import_of_tests_is_reported(tmp_path):
    """Both checkers name the file and line, also for an import inside a function."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "reference").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text(
        "import numpy\n\n\ndef f():\n    from tests.cases import make_step_batch\n    return make_step_batch\n")
    (tmp_path / "reference" / "ref.py").write_text(
        "import numpy as np\nimport collections\nfrom reference.other import x\nfrom specworker import ops\n")
    assert imports_outside(tmp_path, ("benchmarks", "reference"), _not_tests) == [
        "benchmarks/bench.py:5: imports tests.cases.make_step_batch"]
    assert imports_outside(tmp_path, ("reference",), _numpy_stdlib_or_reference) == [
        "reference/ref.py:4: imports specworker.ops"]
