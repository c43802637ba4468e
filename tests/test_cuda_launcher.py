"""Host launchers (``backends/cuda/host_launcher.py``): CUDA modules behind the TfxlaLaunch op's kernel ABI.

Without a GPU (CI): the launchers of representative modules compile with nvcc for sm_80 and sm_90 (and
PTX) into shared objects with no warnings, host code included; loaded with ctypes they export exactly
the ABI, their signature is the CPU backend's for the same module, and ``tfxla_init`` fails with a clear
"no usable CUDA device" message instead of crashing. The same host code compiled against the host
emulator's stand-in runtime (``host_emulator.compile_emulated_launcher``) runs every module of
``tests.gpu.cases.MODULES`` and corpus modules with host control flow, and matches the evaluator.
With a GPU (``tests/gpu/run.sh``) the nvcc-built launchers run on it against the evaluator; those tests
skip elsewhere with the reason. Neither TensorFlow nor PyCUDA is imported here.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import hlo
from backends.codegen.abi import ABI_VERSION
from backends.cpu.codegen import generate as generate_c
from backends.cpu.runtime import Kernel, KernelError
from backends.cuda.codegen import GeneratedModule, generate
from backends.cuda.compiler import NvccNotFound, NvccOptions, require_nvcc
from backends.cuda.host_emulator import compile_emulated_launcher
from backends.cuda.host_launcher import (LauncherOptions, ProgramOutOfBounds, compile_launcher,
                                         launcher_source)
from backends.cuda.pipeline import optimize
from backends.cuda.program import BufRef, Copy, Program
from tests.gpu.cases import MODULES, compare, corpus, have_cuda_device, random_args

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
GPU = have_cuda_device()
needs_gpu = pytest.mark.skipif(GPU is not None, reason=f"no GPU run: {GPU}")
needs_no_gpu = pytest.mark.skipif(GPU is None, reason="a CUDA device is present: init succeeds here")
STRICT = NvccOptions(warnings_as_errors=True)
ABI = {"tfxla_abi_version", "tfxla_signature", "tfxla_scratch_bytes", "tfxla_init", "tfxla_teardown", "tfxla_run"}

# Host steps (while, conditional), constants, split reductions with device globals, serial sort/scatter,
# f16/bf16, and two XLA-dumped modules with host control flow.
REPRESENTATIVE = ("control_flow", "full_reduce", "sort_scatter", "narrow_floats", "corpus/switch_case/hlo",
                  "corpus/tensor_array_loop/optimized_hlo")
EMULATED_CORPUS = ("while_loop_counter_acc/hlo", "tensor_array_loop/optimized_hlo", "cond_true_branch/hlo",
                   "cond_false_branch/optimized_hlo", "switch_case/hlo", "top_k/hlo", "dynamic_index/hlo",
                   "mlp_grad/optimized_hlo")


def _corpus() -> dict[str, tuple]:
    return {f"corpus/{name}/{stage}": (text, stage, args) for name, stage, text, args in corpus()}


def case(name: str) -> tuple[hlo.HloModule, hlo.HloModule, list | None]:
    """(module as written, module to compile, fixed inputs or None) of a MODULES or ``corpus/`` name."""
    if name in MODULES:
        module = hlo.parse_module(MODULES[name])
        return module, optimize(module), None
    text, stage, args = _corpus()[name]
    module = hlo.parse_module(text)
    return module, optimize(module) if stage == "hlo" else module, args


def inputs(original: hlo.HloModule, fixed, seed: int) -> list[np.ndarray]:
    return fixed if fixed is not None else random_args(original, seed)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    """$TFXLA_CACHE_DIR when set (tests/gpu/run.sh sets it), else a fresh directory."""
    return os.environ.get("TFXLA_CACHE_DIR") or str(tmp_path_factory.mktemp("cuda_launchers"))


def _map(fn, names) -> dict:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(zip(names, pool.map(fn, names)))


@pytest.fixture(scope="module")
def built(cache) -> dict:
    """The representative launchers compiled by nvcc with every warning an error."""
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    return _map(lambda n: compile_launcher(case(n)[1], LauncherOptions(nvcc=STRICT, cache_dir=cache)),
                REPRESENTATIVE)


class Abi:
    """A launcher .so through ctypes, without tfxla_init (which needs a GPU)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.lib.tfxla_signature.restype = ctypes.c_char_p
        self.lib.tfxla_scratch_bytes.restype = ctypes.c_int64
        self.lib.tfxla_init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
        self.lib.tfxla_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]

    def signature(self) -> dict:
        return json.loads(self.lib.tfxla_signature().decode())

    def init(self) -> tuple[int, str, int | None]:
        state, err = ctypes.c_void_p(), ctypes.create_string_buffer(1024)
        status = self.lib.tfxla_init(ctypes.byref(state), err, 1024)
        return status, err.value.decode(), state.value


# --- nvcc: the real shared objects ------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_the_launcher_compiles_for_sm80_and_sm90_without_warnings(built, name: str) -> None:
    compiled = built[name]
    command = " ".join(compiled.command)
    for flag in ("-shared", "-cudart static", "code=sm_80", "code=[sm_90,compute_90]", "-Werror all-warnings",
                 "-Wall,-Wextra,-Werror", "-fvisibility=hidden", "--exclude-libs,ALL"):
        assert flag in command, flag
    assert compiled.path.suffix == ".so" and compiled.path.stat().st_size > 0
    assert compiled.source_path.read_text() == compiled.source


@needs_nvcc
@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_the_signature_is_the_cpu_backends_and_only_the_abi_is_exported(built, name: str) -> None:
    compiled = built[name]
    abi = Abi(compiled.path)
    assert abi.lib.tfxla_abi_version() == ABI_VERSION and abi.lib.tfxla_scratch_bytes() == 0
    sig = abi.signature()
    cpu = generate_c(case(name)[1]).signature
    assert {k: sig[k] for k in ("abi_version", "module", "inputs", "outputs")} == \
        {k: cpu[k] for k in ("abi_version", "module", "inputs", "outputs")}
    assert sig["scratch_bytes"] == 0 and sig["backend"] == "cuda"
    assert sig["device_scratch_bytes"] == compiled.generated.program.scratch_bytes
    if shutil.which("nm"):
        out = subprocess.run(["nm", "-D", "--defined-only", str(compiled.path)], capture_output=True, text=True)
        assert {line.split()[-1] for line in out.stdout.splitlines() if line.strip()} == ABI


@needs_nvcc
@needs_no_gpu
def test_init_without_a_device_is_a_clear_error_not_a_crash(built) -> None:
    abi = Abi(built["control_flow"].path)
    for _ in range(2):  # a failed init leaves nothing behind: it can be asked again
        status, message, state = abi.init()
        assert status == 1 and state is None
        assert message.startswith("backend=cuda: no usable CUDA device: "), message
        assert "cudaGetDeviceCount" in message and "needs an NVIDIA GPU and a driver for CUDA" in message
    err = ctypes.create_string_buffer(256)
    assert abi.lib.tfxla_run(None, None, None, None, None, None, err, 256) == 1
    assert b"state is NULL" in err.value
    with pytest.raises(KernelError, match="no usable CUDA device"):  # the CPU backend's loader says the same
        Kernel(built["control_flow"].path)


@needs_nvcc
def test_launchers_are_cached_by_source_command_and_nvcc_version(built, cache) -> None:
    again = compile_launcher(case("control_flow")[1], LauncherOptions(nvcc=STRICT, cache_dir=cache))
    assert again.cache_hit and again.path == built["control_flow"].path
    relaxed = compile_launcher(case("control_flow")[1], LauncherOptions(cache_dir=cache))  # another command
    assert relaxed.key != again.key


def test_no_nvcc_is_a_clear_error_before_anything_is_compiled(tmp_path) -> None:
    missing = str(tmp_path / "no" / "nvcc")
    with pytest.raises(NvccNotFound, match="backend=cuda needs nvcc"):
        require_nvcc(missing)
    with pytest.raises(NvccNotFound, match=r"TFXLA_NVCC"):
        compile_launcher(case("gelu")[1], LauncherOptions(nvcc=NvccOptions(nvcc=missing), cache_dir=str(tmp_path)))
    assert not list(tmp_path.rglob("*.cu"))


# --- the generated source -------------------------------------------------------------------------

def test_the_launcher_runs_the_program_as_recorded_and_is_deterministic() -> None:
    module = case("control_flow")[1]
    generated = generate(module)
    launcher = launcher_source(generated)
    assert launcher.kernels == generated.source and launcher_source(generate(module)).text == launcher.text
    for launch in generated.program.launches():
        grid, block = (", ".join(map(str, d)) for d in (launch.grid, launch.block))
        assert (f'tfxla_launch(c, {launch.kernel}, "{launch.kernel}", dim3({grid}), dim3({block}), '
                f'{launch.shared_bytes}, a)') in launcher.host
    assert "for (;;)" in launcher.host and "tfxla_read(c, &pred" in launcher.host  # the while loop
    assert "cudaMemcpyHostToDevice" in launcher.host and "cudaMemcpyDeviceToHost" in launcher.host
    assert "std::lock_guard<std::mutex>" in launcher.host


def test_a_step_past_its_buffer_is_refused_at_generation() -> None:
    g = generate(case("gelu")[1])
    n = g.signature["outputs"][0]["dims"]
    size = int(np.prod(n)) * 4
    bad = Program((Copy(BufRef("output", 0, nbytes=size), BufRef("input", 0, nbytes=size), size + 4),), 0)
    with pytest.raises(ProgramOutOfBounds, match="exceed output 0"):
        launcher_source(GeneratedModule(g.source, bad, g.signature, g.kernels))
    bad = Program((Copy(BufRef("scratch", 0, 64, nbytes=64), BufRef("input", 0, nbytes=size), 64),), 32)
    with pytest.raises(ProgramOutOfBounds, match="32-byte arena"):
        launcher_source(GeneratedModule(g.source, bad, g.signature, g.kernels))


# --- the host code on the emulator ------------------------------------------------------------------

EMULATED = tuple(MODULES) + tuple(f"corpus/{c}" for c in EMULATED_CORPUS)


@pytest.fixture(scope="module")
def emulated(cache) -> dict:
    """Every emulated launcher, compiled by the host compiler (two at a time)."""
    return _map(lambda n: compile_emulated_launcher(launcher_source(generate(case(n)[1])), cache).path, EMULATED)


@pytest.mark.parametrize("name", EMULATED)
def test_the_launcher_matches_the_evaluator_on_the_emulator(emulated, name: str) -> None:
    original, _, fixed = case(name)
    kernel = Kernel(emulated[name])
    for seed in (0, 1):
        args = inputs(original, fixed, seed)
        problems = compare(kernel.run(*args), hlo.evaluate(original, *args), name)
        assert not problems, "\n".join(problems)


def test_the_emulated_launcher_refuses_other_dims_and_serializes_threads(emulated) -> None:
    kernel = Kernel(emulated["gelu"])
    (dtype, dims), = kernel.inputs
    with pytest.raises(KernelError, match=rf"input 0: dimension 0 is {dims[0] + 1}, but the kernel was compiled "
                                          rf"for {dims[0]}"):
        kernel.run(np.zeros((dims[0] + 1, *dims[1:]), dtype.numpy))
    xs = [np.random.default_rng(k).standard_normal(dims).astype(np.float32) for k in range(4)]
    want = [kernel.run(x)[0] for x in xs]
    got: dict[int, list] = {}

    def worker(k: int) -> None:
        got[k] = [kernel.run(xs[k])[0] for _ in range(3)]
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        for out in got[k]:
            np.testing.assert_array_equal(out, want[k])


# --- on a GPU -----------------------------------------------------------------------------------------

@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("name", tuple(MODULES) + REPRESENTATIVE[-2:])
def test_the_launcher_matches_the_evaluator_on_the_gpu(cache, name: str) -> None:
    original, module, fixed = case(name)
    kernel = Kernel(compile_launcher(module, LauncherOptions(cache_dir=cache)).path)
    for seed in (0, 1):
        args = inputs(original, fixed, seed)
        problems = compare(kernel.run(*args), hlo.evaluate(original, *args), name)
        assert not problems, "\n".join(problems)
