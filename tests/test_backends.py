"""The ``Backend`` protocol (``backends/__init__.py``): every registered backend implements it, the
registry imports a backend only when it is asked for, the API compiles through the protocol (the
backend's own pipeline, then its ``compile``), and nothing in ``tfxla_plugin/`` names a backend."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from hlo import parse_module

REPO = Path(__file__).resolve().parent.parent


def test_importing_backends_imports_neither_backend() -> None:
    code = ("import sys, backends; import tfxla_plugin.flags; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('backends.cpu', 'backends.cuda', 'pycuda')))))")
    proc = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize("name", backends.names())
def test_every_backend_implements_the_protocol(name: str) -> None:
    backend = backends.get(name)
    assert isinstance(backend, backends.Backend) and backend.name == name and backends.get(name) is backend
    assert backend.source_suffix.startswith(".") and backend.source_language
    assert isinstance(backend.target_features(), tuple)
    pipeline = backend.pipeline(fusion=False)
    assert pipeline.backend == name and pipeline.options.fusion is False


def test_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=re.escape("backend must be one of 'cpu', 'cuda', got 'tpu'")):
        backends.get("tpu")


def test_the_cpu_rebuild_command_is_the_build_command_with_placeholders() -> None:
    from backends.toolchain import CompilerOptions

    argv = backends.get("cpu").rebuild_command("int f(void) { return 0; }\n")
    assert argv == CompilerOptions().command(backends.SOURCE, backends.OUTPUT)
    assert argv.count(backends.SOURCE) == argv.count(backends.OUTPUT) == 1 and "-march=native" in argv


def test_a_cpu_kernel_calling_onednn_is_rebuilt_against_its_headers_and_library() -> None:
    from backends.cpu import dnnl

    install = dnnl.installation()
    if install is None:
        pytest.skip("oneDNN is not installed")
    argv = backends.get("cpu").rebuild_command('#include "oneapi/dnnl/dnnl.h"\n')
    assert f"-I{install.include_dir}" in argv and f"-L{install.lib_dir}" in argv
    assert f"-Wl,-rpath,{install.lib_dir}" in argv and any(a.startswith("-ldnnl") for a in argv)


def test_the_cuda_rebuild_command_is_the_launcher_build(monkeypatch) -> None:
    from backends.cuda.compiler import NvccNotFound, NvccOptions

    backend = backends.get("cuda")
    monkeypatch.setenv("TFXLA_NVCC", "/nonexistent/nvcc")
    with pytest.raises(NvccNotFound, match="backend=cuda needs nvcc"):
        backend.check()
    monkeypatch.setenv("TFXLA_NVCC", sys.executable)  # any executable stands in: the command is not run
    assert backend.rebuild_command("") == NvccOptions(nvcc=sys.executable).shared_command(backends.SOURCE,
                                                                                           backends.OUTPUT)


def test_cluster_compiler_runs_the_pipeline_of_the_backend_it_compiles_for(monkeypatch, tmp_path) -> None:
    """Whatever backend ``--backend`` names: its pipeline, then its compile, through the protocol only."""
    from tfxla_plugin import cluster_compiler
    from tfxla_plugin.flags import Flags

    module = parse_module("HloModule m\n\nENTRY e {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n")
    cpu = backends.get("cpu")
    seen = []
    real_pipeline, real_compile = cpu.pipeline, cpu.compile

    def pipeline(**options):
        seen.append("pipeline")
        return real_pipeline(**options)

    def compile_(optimized, options=None):
        seen.append(("compile", options.cache_dir, options.prepared))
        return real_compile(optimized, options)

    monkeypatch.setattr(cpu, "pipeline", pipeline)
    monkeypatch.setattr(cpu, "compile", compile_)
    monkeypatch.setattr(cluster_compiler, "lower_graph", lambda *a, **k: module)
    compiled = cluster_compiler.compile_cluster("c", None, [], [], Flags(cache_dir=str(tmp_path)))
    assert seen == ["pipeline", ("compile", str(tmp_path), True)] and compiled.backend == "cpu"


def test_nothing_outside_the_registry_names_a_backend() -> None:
    """``tfxla_plugin/`` asks the protocol: no backend package imported, no backend name compared."""
    imports = re.compile(r"^\s*(from|import) backends\.(cpu|cuda)\b", re.M)
    checks = re.compile(r"""[=!]= ?["'](cpu|cuda)["']|["'](cpu|cuda)["'] ?(==|!=|in\b)|\(["']cpu["'], ["']cuda["']\)""")
    found = []
    for path in sorted((REPO / "tfxla_plugin").rglob("*.py")):
        text = path.read_text()
        found += [f"{path.relative_to(REPO)}: {m.group(0).strip()}" for m in imports.finditer(text)]
        found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in checks.finditer(text)]
    assert found == []
