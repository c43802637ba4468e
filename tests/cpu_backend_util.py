"""Shared helpers for the CPU backend tests (``tests/test_cpu_backend_*.py``).

* ``kernel_cache`` (fixture): one kernel cache directory per pytest session, under
  pytest's ``tmp_path_factory``, so every run compiles from scratch and the tests
  never touch the user's ``~/.cache``.
* ``compile_text`` / ``compile_many``: HLO text or modules -> ``Executable``;
  ``compile_many`` generates C serially (Python) and runs gcc on two threads
  (``compile_shared_object`` is process- and thread-safe), keeping failures
  (``CodegenUnsupported``, ``CompileError``) as values so one bad module does not
  hide the others.
* ``module``: HLO text of an ENTRY from parameter specs, body lines and results.
* ``random_args``: deterministic inputs for a module's parameters.
* ``assert_matches``: backend outputs against ``hlo.evaluate`` with per-dtype tolerances.

Tolerances (``tolerance``): integers and pred are exact. f32 gets rtol 1e-5 /
atol 1e-6: the evaluator computes f32 transcendental functions in f64 and rounds
(correctly rounded), glibc's f32 functions are within a few ulp (expf/logf/sinf/
cosf/powf < 1 ulp, tanhf/erff/expm1f/log1pf/cbrtf <= 4 ulp, i.e. <= 5e-7
relative), and sums may be reassociated by the vectorizer; 1e-5 leaves >20x
margin on the ulp bound. f64 gets 1e-12. f16/bf16 results are rounded to their
type after every operation both here and in the evaluator, so they differ by at
most one ulp of the narrow type where an f32 intermediate lands on the other
side of a rounding boundary: one ulp is <= 2^-10 (f16) and <= 2^-7 (bf16)
relative, hence rtol 1e-3 and 8e-3. c64/c128 take the tolerances of f32/f64 (the FFT tests state
theirs: an FFT output's error is relative to the largest output).
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pytest

import hlo
from backends.cpu import CompileOptions, Executable, compile as compile_module, compiler_options_for
from backends.cpu.codegen import generate
from backends.toolchain import CompilerOptions, compile_shared_object
from backends.cpu.runtime import Kernel
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloModule
from hlo.shapes import Shape

@pytest.fixture(scope="session")
def kernel_cache(run_tmp_path) -> Path:
    """The run's kernel cache directory (shared by every CPU backend test module, in every worker)."""
    path = run_tmp_path / "tfxla_kernels"
    path.mkdir(exist_ok=True)
    return path


def parse(text: str) -> HloModule:
    module = hlo.parse_module(text)
    hlo.verify(module)
    return module


def compile_text(text: str | HloModule, cache_dir: Path, compiler: CompilerOptions | None = None) -> Executable:
    module = parse(text) if isinstance(text, str) else text
    return compile_module(module, CompileOptions(cache_dir=str(cache_dir), compiler=compiler))


@dataclass
class Compiled:
    """The outcome of compiling one module: an executable, or the exception that stopped it."""

    module: HloModule | str
    exe: Executable | None = None
    error: BaseException | None = None

    def get(self) -> Executable:
        if self.error is not None:
            raise self.error
        assert self.exe is not None
        return self.exe


def compile_many(modules: dict[str, HloModule | str] | Iterable[tuple[str, HloModule | str]], cache_dir: Path,
                 workers: int = 2, compiler: CompilerOptions | None = None) -> dict[str, Compiled]:
    """Compile many modules, gcc running on ``workers`` threads; errors are kept per module.

    Modules may be given as HLO text (parsed and verified here, errors kept too). ``modules``
    may be a lazy iterable of (key, module) pairs: producing the next module (e.g. tracing
    TF for it) then overlaps with the compiles already submitted."""
    items = modules.items() if isinstance(modules, dict) else modules
    out: dict[str, Compiled] = {}
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for key, module in items:  # codegen is Python: run it here, overlapped with gcc
            out[key] = Compiled(module)
            try:
                if isinstance(module, str):
                    module = out[key].module = parse(module)
                generated = generate(module)
            except Exception as e:  # noqa: BLE001 (reported by the test that owns the module)
                out[key].error = e
                continue
            jobs[key] = (generated, pool.submit(compile_shared_object, generated.source,
                                                compiler_options_for(generated, compiler), str(cache_dir),
                                                module.name))
        for key, (generated, future) in jobs.items():
            try:
                compiled = future.result()
                out[key].exe = Executable(out[key].module, generated, compiled.path, compiled.cache_hit)
            except Exception as e:  # noqa: BLE001
                out[key].error = e
    return out


def module(name: str, params: list[str], lines: list[str], results: list[tuple[str, str]], comps: str = "") -> str:
    """HLO text: ``params`` like ``"x: f32[3]"``, body ``lines``, ``results`` (name, shape) tupled at the root."""
    decls = [f"  %{p.split(':')[0]} = {p.split(': ')[1]} parameter({k})" for k, p in enumerate(params)]
    if len(results) == 1:
        (rname, rshape), = results
        body = decls + lines
        last = body.pop() if body and body[-1].lstrip().startswith(f"%{rname} ") else None
        assert last is not None, f"{name}: the single result must be the last line"
        body.append("  ROOT " + last.lstrip())
        sig = rshape
    else:
        sig = "(" + ", ".join(s for _, s in results) + ")"
        body = decls + lines + [f"  ROOT %out = {sig} tuple({', '.join('%' + r for r, _ in results)})"]
    return (f"HloModule {name.replace('-', '_')}\n{comps}\nENTRY %e ({', '.join(params)}) -> {sig} {{\n"
            + "\n".join(body) + "\n}\n")


# --- inputs ---------------------------------------------------------------------------------


def random_array(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """Small, varied values of ``shape``'s dtype: floats ~N(0, 2) (both parts of a complex), ints in [-9, 9]
    ([0, 19] unsigned)."""
    t, dims = shape.dtype, shape.dims
    if t.is_pred:
        return rng.random(dims) < 0.5
    if t.is_float:
        return (rng.standard_normal(dims) * 2).astype(t.numpy)
    if t.is_complex:
        return (rng.standard_normal(dims) * 2 + 2j * rng.standard_normal(dims)).astype(t.numpy)
    if t.is_unsigned_int:
        return rng.integers(0, 20, dims).astype(t.numpy)
    if t.is_integral:
        return rng.integers(-9, 10, dims).astype(t.numpy)
    raise TypeError(f"no random inputs for {t.value}")


def random_args(module: HloModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [random_array(p.shape, rng) for p in module.entry.parameters]


# --- comparison ------------------------------------------------------------------------------

_TOLERANCE = {P.F32: (1e-5, 1e-6), P.F64: (1e-12, 1e-12), P.F16: (1e-3, 1e-3), P.BF16: (8e-3, 8e-3),
              P.C64: (1e-5, 1e-6), P.C128: (1e-12, 1e-12)}


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for outputs of ``dtype`` (see the module docstring); (0, 0) means exact."""
    return _TOLERANCE.get(P.from_numpy(dtype), (0.0, 0.0))


def assert_matches(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float | None = None,
                   atol: float | None = None, what: str = "") -> None:
    """Backend outputs equal the evaluator's: same count, dims and dtype; values within tolerance."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, the evaluator gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{what} output {k}: dims {g.shape} != evaluator {w.shape}"
        assert g.dtype == w.dtype, f"{what} output {k}: dtype {g.dtype} != evaluator {w.dtype}"
        r, a = tolerance(w.dtype)
        r, a = (r if rtol is None else rtol), (a if atol is None else atol)
        msg = f"{what} output {k} ({w.dtype}, rtol={r}, atol={a})"
        if (r, a) == (0.0, 0.0):
            np.testing.assert_array_equal(g, w, err_msg=msg)
        else:
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=r, atol=a, equal_nan=True, err_msg=msg)


def check_module(exe: Executable, args: Iterable[np.ndarray] | None = None, seed: int = 0,
                 rtol: float | None = None, atol: float | None = None, what: str = "") -> list[np.ndarray]:
    """Run ``exe`` and the evaluator on the same inputs and compare; returns the backend's outputs."""
    args = list(args) if args is not None else random_args(exe.module, seed)
    want = hlo.evaluate(exe.module, *args)
    got = exe(*args)
    assert_matches(got, want, rtol, atol, what or exe.module.name)
    return got


def gcc_supports_asan(cc: str | None = None) -> tuple[bool, str]:
    """Whether ``cc`` can link ``-fsanitize=address`` here (needs libasan, Debian package libasan8)."""
    import subprocess
    import tempfile

    cc = cc or os.environ.get("CC", "gcc")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "probe.c"
        src.write_text("int main(void) { return 0; }\n")
        proc = subprocess.run([cc, "-fsanitize=address", str(src), "-o", str(Path(d) / "probe")],
                              capture_output=True, text=True)
        return proc.returncode == 0, proc.stderr
