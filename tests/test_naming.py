"""Names match meanings (docs/spec.md §7 defect 10)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# FastDeploy [A]'s output-side encoding; the refactor renamed the tensors but some tests kept
# the old names for the new quantity (or the new name for the old quantity).
RETIRED = ("output_padding_offset", "output_cum_offsets", "output_padding_offsets")


def _python_identifiers(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name


def _code_files():
    for folder in ("specworker", "tests", "benchmarks", "custom_ops", "reference", "kernel_harness", "tools"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".cc", ".cu", ".h", ".cuh") and p.name != Path(__file__).name:
                yield p


def _retired_uses(path: Path):
    if path.suffix == ".py":
        return sorted({n for n in _python_identifiers(path) if n in RETIRED})
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)  # comments may cite history
    return sorted({m for m in re.findall(r"\b\w+\b", code) if m in RETIRED})


def test_names_defect10_no_retired_output_offset_identifiers():
    """Defect 10: the refactor's tests named per-token slot ids `output_padding_offset`, so a test
    read like the old quantity while holding the new one. No code identifier in the project may
    use the retired names; the output-side tensors are batch_id_per_token_output and
    cu_seqlens_q_output everywhere."""
    offenders = {str(p.relative_to(ROOT)): u for p in _code_files() if (u := _retired_uses(p))}
    assert not offenders, offenders


def test_names_defect10_checker_catches_a_retired_name(tmp_path):
    bad = tmp_path / "bad_fixture.py"
    bad.write_text("output_padding_offset = [0, 0, 3]\n")
    assert _retired_uses(bad) == ["output_padding_offset"]
    bad_cu = tmp_path / "bad.cu"
    bad_cu.write_text("// output_cum_offsets is history\nint output_cum_offsets = 0;\n")
    assert _retired_uses(bad_cu) == ["output_cum_offsets"]


def _defined_tests(path: Path) -> set[str]:
    """Names of the test functions a module defines itself (imported shared tests do not count)."""
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)
            and n.name.startswith("test_")}


def gpu_tests_repeating_cpu_tests(root: Path = ROOT) -> dict[str, list[str]]:
    """op -> the tests tests/gpu/test_<op>_cuda.py defines that tests/ops/test_<op>.py defines too, once
    "_cuda" is dropped from the name: a test both backends run is written once, in a shared case-test
    module, and imported by both (tests/ngram_case_tests.py and its two importers)."""
    repeats = {}
    for gpu in sorted((root / "tests" / "gpu").glob("test_*_cuda.py")):
        op = gpu.name[len("test_"):-len("_cuda.py")]
        cpu = root / "tests" / "ops" / f"test_{op}.py"
        if cpu.is_file():
            same = {n.replace("_cuda", "") for n in _defined_tests(gpu)} & _defined_tests(cpu)
            if same:
                repeats[op] = sorted(same)
    return repeats


def test_names_no_gpu_test_repeats_a_cpu_test():
    repeats = gpu_tests_repeating_cpu_tests()
    assert not repeats, f"write these once in a shared case-test module: {repeats}"


def test_names_repeat_checker_sees_a_repeated_test(tmp_path):
    (tmp_path / "tests" / "gpu").mkdir(parents=True)
    (tmp_path / "tests" / "ops").mkdir()
    (tmp_path / "tests" / "ops" / "test_foo.py").write_text(
        "from tests.foo_case_tests import test_foo_shared\n\n\ndef test_foo_literal():\n    pass\n")
    (tmp_path / "tests" / "gpu" / "test_foo_cuda.py").write_text(
        "from tests.foo_case_tests import test_foo_shared\n\n\ndef test_foo_cuda_literal():\n    pass\n\n\n"
        "def test_foo_cuda_batch_sizes():\n    pass\n")
    assert gpu_tests_repeating_cpu_tests(tmp_path) == {"foo": ["test_foo_literal"]}
