"""The op build's source lists are derived from the layout and match what was built (docs/spec.md §7 #11)."""

import re
from pathlib import Path

import pytest

from specworker.model_executor import op_build, ops

OPS = op_build.OPS_ROOT
REGISTRATION = re.compile(r"PD_BUILD_OP\((\w+)\)")


def _registered_ops(sources):
    names = {}
    for src in sources:
        for name in REGISTRATION.findall(src.read_text()):
            names[name] = src
    return names


def test_source_list_defect11_every_op_source_is_built():
    """Defect #11 of the refactor's review: setup_ops.py listed a deleted .cu by hand, so the
    ROCm build broke. Ours derives the list; this checks the manifest of the actual build
    names exactly the sources on disk (no stale entry, no unlisted op source)."""
    manifest = op_build.read_manifest()
    assert manifest is not None, f"{op_build.MANIFEST} missing: run `make ops`"
    built = set(manifest["sources"])
    on_disk = {str(p.relative_to(OPS)) for p in op_build.op_sources(manifest["with_cuda"])}
    assert built == on_disk, f"unlisted: {sorted(on_disk - built)}; stale: {sorted(built - on_disk)}"
    missing = [s for s in built if not (OPS / s).is_file()]
    assert not missing, f"manifest lists sources that do not exist: {missing}"


def test_source_list_has_every_cpu_source_and_cuda_sources_when_asked():
    cpu = {p.relative_to(OPS).as_posix() for p in op_build.op_sources(False)}
    cuda = {p.relative_to(OPS).as_posix() for p in op_build.op_sources(True)}
    assert cpu == {f"cpu_ops/{p.name}" for p in (OPS / "cpu_ops").glob("*.cc")} | {
        f"cpu_ops/kernels/{p.name}" for p in (OPS / "cpu_ops" / "kernels").glob("*.cc")}
    assert cpu <= cuda
    assert {f"gpu_ops/{p.name}" for p in (OPS / "gpu_ops").glob("*.cu")} <= cuda
    assert {f"gpu_ops/kernels/{p.name}" for p in (OPS / "gpu_ops" / "kernels").glob("*.cu")} <= cuda


def _variant_of_registered_op(kernel, registered) -> bool:
    """kernel is gpu_ops/kernels/<op>_<variant>.cu and gpu_ops/<op>.cu calls specworker_<op>_<variant>_launch."""
    if kernel.parent.name != "kernels":
        return False
    for name in registered:
        binding = OPS / "gpu_ops" / f"{name}.cu"
        if kernel.stem.startswith(name + "_") and binding.is_file() and \
                f"specworker_{kernel.stem}_launch" in binding.read_text():
            return True
    return False


def test_every_op_has_cpu_kernel_binding_cuda_kernel_reference_and_tests():
    """docs/spec.md §4.6: each op is a cpu_ops/<op>.cc registration, a gpu_ops/<op>.cu binding, a
    gpu_ops/kernels/<op>.cu kernel with an extern "C" launcher, a numpy reference, CPU and GPU tests."""
    registered = _registered_ops(op_build.cpu_sources())
    assert registered, "no PD_BUILD_OP found under custom_ops/cpu_ops"
    root = op_build.REPO_ROOT
    problems = []
    for name, src in registered.items():
        expect = [
            OPS / "gpu_ops" / f"{name}.cu",
            OPS / "gpu_ops" / "kernels" / f"{name}.cu",
            OPS / "gpu_ops" / "kernels" / f"{name}.h",
            root / "reference" / f"{name}.py",
            root / "tests" / "ops" / f"test_{name}.py",
            root / "tests" / "gpu" / f"test_{name}_cuda.py",
        ]
        problems += [f"{name}: missing {p.relative_to(root)}" for p in expect if not p.is_file()]
        kernel = OPS / "gpu_ops" / "kernels" / f"{name}.cu"
        if kernel.is_file():
            text = kernel.read_text()
            if f"specworker_{name}_launch" not in text or 'extern "C"' not in text:
                problems.append(f"{name}: kernels/{name}.cu lacks extern \"C\" specworker_{name}_launch")
            if "paddle" in text.lower().replace("paddlepaddle", ""):
                problems.append(f"{name}: kernels/{name}.cu mentions paddle; kernels must be framework-neutral")
        if not hasattr(ops, name):
            problems.append(f"{name}: no wrapper in specworker.model_executor.ops")
    # A binding or kernel without a registered op is a leftover, except a kernel variant of an op
    # (kernels/<op>_<variant>.cu, e.g. paged_attention_bf16) whose launcher that op's binding calls.
    for p in list((OPS / "gpu_ops").glob("*.cu")) + list((OPS / "gpu_ops" / "kernels").glob("*.cu")):
        if p.stem not in registered and not _variant_of_registered_op(p, registered):
            problems.append(f"{p.relative_to(root)} has no cpu_ops registration")
    assert not problems, "\n".join(problems)


def test_loaded_extension_registers_every_op():
    assert set(_registered_ops(op_build.cpu_sources())) <= ops.load_ops()


def test_stale_build_is_refused(monkeypatch):
    monkeypatch.setattr(op_build, "source_digest", lambda root=OPS: "0" * 64)
    with pytest.raises(ops.OpsNotBuiltError, match="make ops"):
        ops._check_current()


def test_missing_build_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(op_build, "LIBRARY", tmp_path / "specworker_ops.so")
    with pytest.raises(ops.OpsNotBuiltError, match=r"not built .*make ops"):
        ops._check_current()


def test_only_the_extension_module_touches_the_compiled_library():
    """The library is registered and its ops run in exactly one module (and its linear kernel called directly in
    one more, ops/_cpu_linear.py, and the adaptive policy's host arithmetic in spec_decode/policy_host.py); everything
    else goes through wrappers."""
    root = op_build.REPO_ROOT / "specworker"
    users = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "load_op_meta_info_and_register_op" in p.read_text() or "_run_custom_op" in p.read_text()
    )
    assert users == ["model_executor/ops/_extension.py"], users
    # two exceptions, by design, each calling a C API in the same library: the linear's direct CPU path, and the
    # policy's host arithmetic (not an op: numpy arrays, no tensor)
    direct = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "ctypes.CDLL" in p.read_text())
    assert direct == ["model_executor/ops/_cpu_linear.py", "spec_decode/policy_host.py"], direct


def test_cuda_build_targets_sm80_and_sm90a_by_default(monkeypatch):
    """Paddle's CUDAExtension passes no -arch: without these, nvcc's default target has no bf16 MMA."""
    monkeypatch.delenv("SPECWORKER_CUDA_ARCHS", raising=False)
    assert op_build.cuda_gencode_flags() == ["-gencode=arch=compute_80,code=sm_80",
                                            "-gencode=arch=compute_90a,code=sm_90a",
                                            "-gencode=arch=compute_90,code=compute_90"]
    monkeypatch.setenv("SPECWORKER_CUDA_ARCHS", "86;90a 90a")
    assert op_build.cuda_gencode_flags()[:2] == ["-gencode=arch=compute_86,code=sm_86",
                                                "-gencode=arch=compute_90a,code=sm_90a"]


@pytest.mark.parametrize("bad", ["75", "sm_90", "9.0", "90b", " , "])
def test_cuda_arch_list_rejects_what_nvcc_or_the_kernels_cannot_take(bad):
    with pytest.raises(ValueError, match="SPECWORKER_CUDA_ARCHS"):
        op_build.cuda_gencode_flags(bad)
