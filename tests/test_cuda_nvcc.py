"""Every kernel the CUDA generator emits compiles with nvcc for sm_80 and sm_90 (and PTX) with no warnings.

Modules: the XLA-dumped corpus (``tests/gpu/corpus.npz``, both stages; the unoptimized stage
through our HLO pipeline), the modules of the fusion pass tests, ``tests.gpu.cases.MODULES``, and
the CPU backend's per-opcode cases (``tests/test_cpu_backend_opcodes.py``, as written).
Warnings are errors (``-Werror all-warnings``). To fit the CI budget, modules are compiled
~25 to a translation unit (``backends.cuda.compiler.batch_source``: the kernels unchanged, in a
namespace per module), two nvcc processes at a time, into the session's cache; one module is also
compiled alone, and the cache and compile errors are checked. No GPU is needed; without nvcc the
tests skip.
"""

from __future__ import annotations

import concurrent.futures
import re
import shutil
from pathlib import Path

import pytest

import backends.cuda as cuda
import hlo
from backends.cuda.compiler import NvccOptions, batch_source, compile_fatbin
from backends.cuda.pipeline import optimize
from tests.gpu.cases import MODULES, corpus

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

STRICT = NvccOptions(warnings_as_errors=True)
FUSION_TEST_FILES = ("test_pass_fusion.py", "test_pass_fusion_multi_output.py", "fusion_helpers.py")
BATCH = 25


def fusion_test_modules() -> dict[str, str]:
    """The complete HLO modules written out in the fusion pass tests."""
    out = {}
    for f in FUSION_TEST_FILES:
        text = (Path(__file__).parent / f).read_text()
        for k, m in enumerate(re.finditer(r'"""(\s*HloModule .*?)"""', text, re.S)):
            out[f"{f}:{k}"] = m.group(1)
    return out


def all_modules() -> dict[str, hlo.HloModule]:
    modules = {}
    for name, stage, text, _args in corpus():
        m = hlo.parse_module(text)
        modules[f"corpus/{name}/{stage}"] = optimize(m) if stage == "hlo" else m
    for name, text in {**fusion_test_modules(), **MODULES}.items():
        modules[name] = optimize(hlo.parse_module(text))
    from tests.test_cpu_backend_opcodes import ALL_CASES

    for _, case in ALL_CASES:
        if re.search(r"\bc(64|128)\[", case.text):
            continue  # complex types are refused by the CUDA backend (test_cuda_opcodes.py)
        modules[f"opcode/{case.id}"] = hlo.parse_module(case.text)
    return modules


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return {name: cuda.emit_source(m) for name, m in all_modules().items()}


def test_the_test_modules_are_all_there(sources) -> None:
    assert sum(k.startswith("corpus/") for k in sources) == 196, "tests/gpu/corpus.npz is missing or short"
    assert sum(":" in k for k in sources) >= 5


def test_every_generated_kernel_compiles_for_sm80_and_sm90_without_warnings(sources, tmp_path_factory) -> None:
    cache = tmp_path_factory.mktemp("cuda_kernels")
    names = sorted(sources)
    batches = [names[i:i + BATCH] for i in range(0, len(names), BATCH)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(compile_fatbin, batch_source([sources[n] for n in b]), STRICT, str(cache), "batch")
                   for b in batches]
        for batch, future in zip(batches, futures):
            try:
                result = future.result()
            except cuda.CompileError as e:
                pytest.fail(f"modules {batch} do not compile:\n{e}")
            assert result.stderr == "", f"nvcc diagnostics for {batch}:\n{result.stderr}"
            assert result.path.stat().st_size > 0


def test_one_module_compiles_alone_and_the_second_compile_is_a_cache_hit(tmp_path) -> None:
    source = cuda.emit_source(optimize(hlo.parse_module(MODULES["softmax"])))
    first = compile_fatbin(source, STRICT, tmp_path, "softmax")
    again = compile_fatbin(source, STRICT, tmp_path, "softmax")
    assert not first.cache_hit and again.cache_hit and again.path == first.path
    assert first.source_path.read_text() == source
    assert "-gencode=arch=compute_80,code=sm_80" in first.command
    assert "-gencode=arch=compute_90,code=[sm_90,compute_90]" in first.command
    data = first.read()
    assert data[:4] == bytes.fromhex("50ed55ba")  # fat binary magic (0xba55ed50, little-endian)
    other = compile_fatbin(source, NvccOptions(archs=(90,), warnings_as_errors=True), tmp_path, "softmax")
    assert other.key != first.key and not other.cache_hit


def test_a_compile_error_keeps_the_command_stderr_and_source(tmp_path) -> None:
    good = cuda.emit_source(optimize(hlo.parse_module(MODULES["gelu"])))
    at = good.rindex("tfxla_vtanhf(")  # in the kernel, not the prelude
    bad = good[:at] + "no_such_fn(" + good[at + len("tfxla_vtanhf("):]
    with pytest.raises(cuda.CompileError) as info:
        compile_fatbin(bad, STRICT, tmp_path, "gelu")
    err = info.value
    assert err.command[0].endswith("nvcc") and "no_such_fn" in err.stderr
    assert Path(err.source_path).read_text() == bad
    assert not list(tmp_path.glob("*/*.fatbin"))
