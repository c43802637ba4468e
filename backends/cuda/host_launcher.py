"""Host launchers: a compiled module as one shared object that the TfxlaLaunch op loads like a CPU kernel.

``launcher_source(generated)`` turns a module's CUDA source and host ``Program`` (``codegen.generate``)
into one CUDA translation unit: the kernels, then host C++ exporting the kernel ABI version 2 that
``tfxla_plugin/ops/tfxla_launch.cc`` speaks (the kernel ABI, ``backends/codegen/abi.py``):

* ``tfxla_signature``: the shared signature JSON (``backends/codegen/abi.py``) for the same module (inputs and outputs with dtype, dims
  and minor_to_major), with ``scratch_bytes`` 0 (the op's host scratch is not used; the device arena is
  the launcher's own, ``device_scratch_bytes``) and ``backend`` "cuda";
* ``tfxla_init``: finds a device with the CUDA runtime API (no driver is an error message, not a crash),
  then, in the primary context of device 0 (the runtime API's context), allocates every device buffer
  once (one per input and output, the scratch arena), creates a stream and looks up the constants;
* ``tfxla_run``: one mutex per state (the op may call from several threads); checks the input dims,
  copies the inputs host-to-device, runs the program (kernel launches with their recorded grid, block
  and shared bytes, device copies, while loops and conditionals on the host reading the predicate or
  index back, as ``runtime.py`` does), copies the outputs back and synchronizes. A CUDA error is a
  nonzero return with a message naming the kernel or step.

Invariants: every buffer access of the program is checked at generation against its buffer's size
(``ProgramOutOfBounds``), host copies move exactly the signature's bytes, and nothing but the
``tfxla_*`` functions is exported. ``compile_launcher`` builds the unit with nvcc
(``NvccOptions.shared_command``: sm_80 and sm_90 cubins and PTX, the static CUDA runtime) into the
kernel cache; ``host_emulator.compile_emulated_launcher`` compiles the same host code against a host
stand-in of the runtime, so the launcher's logic also runs where there is no GPU.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from backends.codegen.abi import ABI_VERSION, RUN_PARAMS, RUNTIME_C, emit_exports, emit_run_checks
from backends.codegen.buffer import IndentedBuffer, c_comment
from backends.cuda.codegen import CodegenOptions, GeneratedModule, generate
from backends.cuda.compiler import NvccOptions, cache_key, require_nvcc
from backends.cuda.pipeline import prepare
from backends.cuda.program import BufRef, Copy, Launch, Step, Switch, WhileLoop
from backends.kernel_cache import build_cached
from hlo.dtypes import PrimitiveType
from hlo.ir import HloModule
from hlo.verifier import verify

STATIC_SHARED_LIMIT = 48 * 1024  # more dynamic shared memory needs cudaFuncSetAttribute

# The kernel call of a real build: every kernel parameter is a pointer, passed from `a`.
KERNEL_CALL = r"""
#include <cuda_runtime.h>
#include <cstddef>
#include <utility>

template <typename... P, std::size_t... I>
static void tfxla_call_kernel_(void (*k)(P...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                               void* const* a, std::index_sequence<I...>) {
  (void)a;
  k<<<grid, block, shared, stream>>>(static_cast<P>(a[I])...);
}

template <typename... P>
static void tfxla_call_kernel(void (*k)(P...), const char* name, dim3 grid, dim3 block, size_t shared,
                              cudaStream_t stream, void* const* a) {
  (void)name;
  tfxla_call_kernel_(k, grid, block, shared, stream, a, std::index_sequence_for<P...>{});
}
"""

# Host helpers over the runtime API (shared by the real and the emulated build).
COMMON = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#define TFXLA_EXPORT extern "C" __attribute__((visibility("default")))
""" + RUNTIME_C + r"""
namespace {

/* One call of tfxla_init or tfxla_run: its stream, where its error message goes, the last kernel launched. */
struct tfxla_call {
  cudaStream_t stream;
  char* err;
  size_t errlen;
  const char* last_kernel;
};

[[maybe_unused]] int tfxla_fail(tfxla_call& c, cudaError_t e, const char* what) {
  if (c.last_kernel != nullptr)
    snprintf(c.err, c.errlen,
             "backend=cuda: %s failed: %s (%s); kernels run asynchronously, so the error can come from kernel %s "
             "or one launched before it (CUDA_LAUNCH_BLOCKING=1 reports it at the failing launch)",
             what, cudaGetErrorString(e), cudaGetErrorName(e), c.last_kernel);
  else
    snprintf(c.err, c.errlen, "backend=cuda: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return 1;
}

[[maybe_unused]] int tfxla_check(tfxla_call& c, cudaError_t e, const char* what) {
  return e == cudaSuccess ? 0 : tfxla_fail(c, e, what);
}

template <typename... P>
[[maybe_unused]] int tfxla_launch(tfxla_call& c, void (*k)(P...), const char* name, dim3 grid, dim3 block,
                                  size_t shared, void* const* a) {
  tfxla_call_kernel(k, name, grid, block, shared, c.stream, a);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    char what[192];
    snprintf(what, sizeof what, "launching kernel %s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>", name, grid.x, grid.y,
             grid.z, block.x, block.y, block.z, shared);
    return tfxla_fail(c, e, what);
  }
  c.last_kernel = name;
  return 0;
}

[[maybe_unused]] int tfxla_copy(tfxla_call& c, void* dst, const void* src, size_t n, const char* what) {
  return tfxla_check(c, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c.stream), what);
}

/* Device-to-host read of a predicate or branch index, waiting for it (host control flow). */
[[maybe_unused]] int tfxla_read(tfxla_call& c, void* host, const void* src, size_t n, const char* what) {
  if (tfxla_check(c, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, c.stream), what)) return 1;
  return tfxla_check(c, cudaStreamSynchronize(c.stream), what);
}

[[maybe_unused]] int tfxla_alloc(tfxla_call& c, char** p, size_t n, const char* what) {
  void* v = nullptr;
  if (tfxla_check(c, cudaMalloc(&v, n < 256 ? 256 : n), what)) return 1;
  *p = static_cast<char*>(v);
  return 0;
}

template <typename T>
[[maybe_unused]] int tfxla_symbol(tfxla_call& c, char** p, const T& symbol, const char* what) {
  void* v = nullptr;
  if (tfxla_check(c, cudaGetSymbolAddress(&v, symbol), what)) return 1;
  *p = static_cast<char*>(v);
  return 0;
}

}  // namespace
"""


class ProgramOutOfBounds(ValueError):
    """A program step would read or write past a buffer (a generator bug; nothing is emitted)."""


@dataclass(frozen=True)
class LauncherSource:
    """A module's host launcher: the kernels' CUDA source, the host code, and the ABI signature."""

    module: str
    kernels: str  # the generated CUDA C (prelude, constants, kernels)
    host: str  # state, program and the exported tfxla_* functions
    signature: dict
    kernel_names: tuple[str, ...]

    @property
    def text(self) -> str:
        """The whole translation unit nvcc compiles."""
        return self.kernels + KERNEL_CALL + COMMON + self.host


def launcher_signature(generated: GeneratedModule) -> dict:
    """The module's signature as the launcher reports it: no host scratch (the arena is on the device)."""
    sig = generated.signature
    return {**sig, "scratch_bytes": 0, "backend": "cuda", "device_scratch_bytes": sig["scratch_bytes"]}


def _nbytes(entry: dict) -> int:
    n = PrimitiveType.from_text(entry["dtype"]).byte_size
    for d in entry["dims"]:
        n *= d
    return n


def _c_string(text: str) -> str:
    return json.dumps(text)


class _ProgramEmitter:
    """The program's steps as host C++ over the state's buffers, every access checked against its buffer."""

    def __init__(self, generated: GeneratedModule):
        sig = generated.signature
        self.sizes = {"input": [_nbytes(e) for e in sig["inputs"]], "output": [_nbytes(e) for e in sig["outputs"]]}
        self.scratch_bytes = generated.program.scratch_bytes
        self.globals: dict[str, int] = {}  # symbol -> slot, in first-use order
        self.shared: dict[str, int] = {}  # kernel -> dynamic shared bytes above the static limit

    def pointer(self, ref: BufRef, nbytes: int, what: str) -> str:
        """The C expression of ``ref``; ``nbytes`` from it must lie inside its buffer."""
        if ref.space in ("input", "output"):
            sizes = self.sizes[ref.space]
            if not 0 <= ref.index < len(sizes) or ref.offset + nbytes > sizes[ref.index]:
                raise ProgramOutOfBounds(f"{what}: {nbytes} bytes at {ref} exceed {ref.space} {ref.index}")
            field = "in" if ref.space == "input" else "out"
            return f"st->{field}[{ref.index}]" + (f" + {ref.offset}" if ref.offset else "")
        if ref.space == "scratch":
            if ref.offset + nbytes > self.scratch_bytes:
                raise ProgramOutOfBounds(f"{what}: {nbytes} bytes at {ref} exceed the {self.scratch_bytes}-byte arena")
            return f"st->scratch + {ref.offset}"
        if ref.space == "global":
            if ref.offset + nbytes > ref.nbytes:
                raise ProgramOutOfBounds(f"{what}: {nbytes} bytes at {ref} exceed {ref.symbol} ({ref.nbytes} bytes)")
            slot = self.globals.setdefault(ref.symbol, len(self.globals))
            return f"st->g[{slot}]" + (f" + {ref.offset}" if ref.offset else "")
        raise ProgramOutOfBounds(f"{what}: unknown buffer space {ref.space!r}")

    def steps(self, out: IndentedBuffer, steps: tuple[Step, ...] | list[Step]) -> None:
        for s in steps:
            EMITTERS[type(s)](self, out, s)


@contextlib.contextmanager
def _scope(out: IndentedBuffer):
    """A bare ``{ ... }`` block (its names stay local)."""
    out.line("{")
    with out.indent():
        yield
    out.line("}")


def _launch(em: _ProgramEmitter, out: IndentedBuffer, s: Launch) -> None:
    what = f"kernel {s.kernel}"
    args = ", ".join(em.pointer(a, a.nbytes, f"{what} argument {k}") for k, a in enumerate(s.args))
    if s.shared_bytes > STATIC_SHARED_LIMIT:
        em.shared[s.kernel] = max(em.shared.get(s.kernel, 0), s.shared_bytes)
    grid, block = (", ".join(map(str, d)) for d in (s.grid, s.block))
    with _scope(out):
        out.line(f"void* const a[] = {{{args}}};" if args else "void* const* const a = nullptr;")
        out.line(f'if (tfxla_launch(c, {s.kernel}, "{s.kernel}", dim3({grid}), dim3({block}), {s.shared_bytes}, a)) '
                 f'return 1;')


def _copy(em: _ProgramEmitter, out: IndentedBuffer, s: Copy) -> None:
    what = f"copy {s.dst} <- {s.src} ({s.nbytes} bytes)"
    dst, src = em.pointer(s.dst, s.nbytes, what), em.pointer(s.src, s.nbytes, what)
    if s.nbytes:
        out.line(f"if (tfxla_copy(c, {dst}, {src}, {s.nbytes}, {_c_string(what)})) return 1;")


def _while(em: _ProgramEmitter, out: IndentedBuffer, s: WhileLoop) -> None:
    what = f"reading the while predicate {s.pred}"
    pred = em.pointer(s.pred, 1, what)
    with out.block("for (;;)"):
        em.steps(out, s.cond)
        out.line("uint8_t pred = 0;")
        out.line(f"if (tfxla_read(c, &pred, {pred}, 1, {_c_string(what)})) return 1;")
        out.line("if (!pred) break;")
        em.steps(out, s.body)


def _switch(em: _ProgramEmitter, out: IndentedBuffer, s: Switch) -> None:
    n = len(s.branches)
    with _scope(out):
        if s.is_pred:
            what = f"reading the conditional's predicate {s.index}"
            out.line("uint8_t pred = 0;")
            out.line(f"if (tfxla_read(c, &pred, {em.pointer(s.index, 1, what)}, 1, {_c_string(what)})) return 1;")
            out.line("const int64_t branch = pred ? 0 : 1;")
        else:
            what = f"reading the conditional's branch index {s.index}"
            out.line("int32_t index = 0;")
            out.line(f"if (tfxla_read(c, &index, {em.pointer(s.index, 4, what)}, 4, {_c_string(what)})) return 1;")
            out.line(f"const int64_t branch = index >= 0 && index < {n} ? index : {n - 1};  /* else the last */")
        for k, branch in enumerate(s.branches):
            head = f"if (branch == {k})" if k == 0 else (f"else if (branch == {k})" if k < n - 1 else "else")
            with out.block(head):
                em.steps(out, branch)


EMITTERS = {Launch: _launch, Copy: _copy, WhileLoop: _while, Switch: _switch}


def _state(out: IndentedBuffer, n_in: int, n_out: int, n_globals: int) -> None:
    with out.block("struct tfxla_state", close="};"):
        out.line("std::mutex mu;")
        out.line("int device = 0;")
        out.line("cudaStream_t stream = nullptr;")
        out.line(f"char* in[{max(n_in, 1)}] = {{}};")
        out.line(f"char* out[{max(n_out, 1)}] = {{}};")
        out.line("char* scratch = nullptr;")
        out.line(f"char* g[{max(n_globals, 1)}] = {{}};  /* the constants' device addresses */")
    with out.block("void tfxla_release(tfxla_state* st)"):
        out.line("for (char* p : st->in) if (p) cudaFree(p);")
        out.line("for (char* p : st->out) if (p) cudaFree(p);")
        out.line("if (st->scratch) cudaFree(st->scratch);")
        out.line("if (st->stream) cudaStreamDestroy(st->stream);")
        out.line("delete st;")
    with out.block("int tfxla_abandon(tfxla_state* st)"):
        out.line("tfxla_release(st);")
        out.line("return 1;")


def _init(out: IndentedBuffer, em: _ProgramEmitter, module: str) -> None:
    with out.block("TFXLA_EXPORT int tfxla_init(void** state, char* err, size_t errlen)"):
        out.line("*state = nullptr;")
        out.line("int count = 0;")
        out.line("const cudaError_t found = cudaGetDeviceCount(&count);")
        with out.block("if (found != cudaSuccess || count < 1)"):
            out.line('snprintf(err, errlen, "backend=cuda: no usable CUDA device: %s (cudaGetDeviceCount: %s); "')
            out.line('         "kernel of module %s needs an NVIDIA GPU and a driver for CUDA %d.%d or newer",')
            out.line('         found == cudaSuccess ? "no device found" : cudaGetErrorString(found),')
            out.line(f"         cudaGetErrorName(found), {_c_string(module)}, CUDART_VERSION / 1000, "
                     f"CUDART_VERSION % 1000 / 10);")
            out.line("return 1;")
        out.line("tfxla_state* st = new (std::nothrow) tfxla_state();")
        with out.block("if (st == nullptr)"):
            out.line('snprintf(err, errlen, "backend=cuda: out of host memory");')
            out.line("return 1;")
        out.line("tfxla_call c{nullptr, err, errlen, nullptr};")
        steps = [("cudaSetDevice(0)", "cudaSetDevice(0)"),
                 ("cudaFree(nullptr)", "creating the primary context of device 0"),
                 ("cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)", "cudaStreamCreateWithFlags")]
        for call, what in steps:
            out.line(f"if (tfxla_check(c, {call}, {_c_string(what)})) return tfxla_abandon(st);")
        out.line("c.stream = st->stream;")
        for space, field in (("input", "in"), ("output", "out")):
            for k, n in enumerate(em.sizes[space]):
                what = _c_string(f"cudaMalloc of {space} {k} ({n} bytes)")
                out.line(f"if (tfxla_alloc(c, &st->{field}[{k}], {n}, {what})) return tfxla_abandon(st);")
        what = _c_string(f"cudaMalloc of the scratch arena ({em.scratch_bytes} bytes)")
        out.line(f"if (tfxla_alloc(c, &st->scratch, {em.scratch_bytes}, {what})) return tfxla_abandon(st);")
        for symbol, slot in em.globals.items():
            what = _c_string(f"cudaGetSymbolAddress({symbol})")
            out.line(f"if (tfxla_symbol(c, &st->g[{slot}], {symbol}, {what})) return tfxla_abandon(st);")
        for kernel, nbytes in sorted(em.shared.items()):
            call = f"cudaFuncSetAttribute({kernel}, cudaFuncAttributeMaxDynamicSharedMemorySize, {nbytes})"
            out.line(f"if (tfxla_check(c, {call}, {_c_string(call)})) return tfxla_abandon(st);")
        out.line("*state = st;")
        out.line("return 0;")


def _copies(out: IndentedBuffer, em: _ProgramEmitter, space: str) -> None:
    """The host<->device copies of every non-empty input (before the program) or output (after it)."""
    to_device = space == "input"
    ptr = "in" if to_device else "out"
    kind, where = ("cudaMemcpyHostToDevice", "to the device") if to_device else ("cudaMemcpyDeviceToHost", "to the host")
    for k, n in enumerate(em.sizes[space]):
        if not n:
            continue
        host, dev = f"{ptr}[{k}]", f"st->{ptr}[{k}]"
        dst, src = (dev, host) if to_device else (host, dev)
        what = _c_string(f"copying {space} {k} {where} ({n} bytes)")
        out.line(f'if ({host} == nullptr) {{ snprintf(c.err, c.errlen, "backend=cuda: {space} {k} is NULL"); '
                 f'return 1; }}')
        out.line(f"if (tfxla_check(c, cudaMemcpyAsync({dst}, {src}, {n}, {kind}, c.stream), {what})) return 1;")


def _run(out: IndentedBuffer, em: _ProgramEmitter, signature: dict) -> None:
    with out.block("int tfxla_run_locked(tfxla_state* st, tfxla_call& c, const void* const* in, void* const* out)"):
        out.line('if (tfxla_check(c, cudaSetDevice(st->device), "cudaSetDevice")) return 1;')
        _copies(out, em, "input")
        out.line("if (tfxla_program(c, st)) return 1;")
        _copies(out, em, "output")
        out.line('return tfxla_check(c, cudaStreamSynchronize(c.stream), "cudaStreamSynchronize after the program");')
    out.line("}  // namespace")
    out.line("")
    with out.block(f"TFXLA_EXPORT int tfxla_run({RUN_PARAMS})"):
        out.line("(void)scratch;  /* the device arena is the launcher's own */")
        out.line("(void)rt;  /* the program runs on the device: no host threads to share */")
        emit_run_checks(out, [(f"input {k}", entry["dims"]) for k, entry in enumerate(signature["inputs"])])
        out.line("tfxla_state* st = static_cast<tfxla_state*>(state);")
        out.line("std::lock_guard<std::mutex> lock(st->mu);")
        out.line("tfxla_call c{st->stream, err, errlen, nullptr};")
        out.line("if (tfxla_run_locked(st, c, in, out) == 0) return 0;")
        out.line("cudaStreamSynchronize(c.stream);  /* nothing of this call may still run after it returns */")
        out.line("return 1;")


def _host(generated: GeneratedModule, signature: dict) -> str:
    em = _ProgramEmitter(generated)
    program = IndentedBuffer()
    with program.block("int tfxla_program(tfxla_call& c, tfxla_state* st)"):
        em.steps(program, generated.program.steps)
        program.line("return 0;")
    out = IndentedBuffer()
    out.line("")
    out.line(c_comment(f"Host launcher (tfxla kernel ABI version {ABI_VERSION}) of HLO module {signature['module']}: "
                       f"{len(em.sizes['input'])} input(s), {len(em.sizes['output'])} output(s), device arena "
                       f"{em.scratch_bytes} bytes."))
    out.line("namespace {")
    out.line("")
    _state(out, len(em.sizes["input"]), len(em.sizes["output"]), len(em.globals))
    out.line("")
    out.splice(program)
    out.line("")
    _run(out, em, signature)
    out.line("")
    emit_exports(out, signature)
    with out.block("TFXLA_EXPORT void tfxla_teardown(void* state)"):
        out.line("if (state) tfxla_release(static_cast<tfxla_state*>(state));")
    _init(out, em, signature["module"])
    return out.getvalue()


def launcher_source(generated: GeneratedModule) -> LauncherSource:
    """The host launcher of a generated module (raises ``ProgramOutOfBounds`` on a bad buffer access)."""
    signature = launcher_signature(generated)
    return LauncherSource(signature["module"], generated.source, _host(generated, signature), signature,
                          generated.kernels)


@dataclass(frozen=True)
class LauncherOptions:
    codegen: CodegenOptions | None = None
    nvcc: NvccOptions | None = None
    cache_dir: str | None = None
    prepared: bool = False  # the module went through the CUDA pipeline (or ``prepare``): compile it as given


@dataclass(frozen=True)
class CompiledLauncher:
    """A host launcher compiled to a shared object (``path``), with what produced it."""

    path: Path
    source_path: Path
    key: str
    cache_hit: bool
    command: tuple[str, ...]
    launcher: LauncherSource
    generated: GeneratedModule | None = None

    @property
    def source(self) -> str:
        return self.launcher.text

    @property
    def signature(self) -> dict:
        return self.launcher.signature


def build_launcher(source: str, nvcc: NvccOptions | None = None, cache_dir: str | os.PathLike | None = None,
                   name: str = "launcher"):
    """Compile a launcher's translation unit to a shared object, or return the cached one (``CachedBuild``)."""
    nvcc = nvcc or NvccOptions()
    require_nvcc(nvcc.nvcc)
    return build_cached(source, cache_key(source, nvcc, shared=True), nvcc.shared_command, cache_dir=cache_dir,
                        name=name, source_suffix=".cu", output_suffix=".so", tool="nvcc")


def compile_launcher(module: HloModule, options: LauncherOptions | None = None) -> CompiledLauncher:
    """Verify ``module``, run the CUDA backend's kernel-shape passes on it unless ``options.prepared`` (as
    ``runtime.compile``), generate it and compile its host launcher (nvcc; no GPU needed)."""
    options = options or LauncherOptions()
    require_nvcc((options.nvcc or NvccOptions()).nvcc)
    verify(module)
    if not options.prepared:
        module = prepare(module)
    generated = generate(module, options.codegen)
    launcher = launcher_source(generated)
    built = build_launcher(launcher.text, options.nvcc, options.cache_dir, name=module.name)
    return CompiledLauncher(built.path, built.source_path, built.key, built.cache_hit, built.command, launcher,
                            generated)
