"""Errors and safety of the CPU backend: dims checks, AddressSanitizer, CompileError, the kernel cache.

(a) A kernel given input dims other than its compiled ones returns an error
    status naming the input and the dim (through ``Kernel.run`` and through the
    raw C entry point); wrong dtype, rank or arity are TypeError/ValueError
    before any C runs.
(b) Generated kernels (reductions, pad, gather, scatter with out-of-bounds
    windows, sort, clamped dynamic-update-slice) are compiled with
    ``-fsanitize=address`` and linked into a generated C harness executable that
    mallocs every buffer at its exact size; it runs as a subprocess (ASan inside a
    ctypes-loaded library is fragile) and must report no error, print the
    outputs the evaluator gives, and, given wrong dims, return an error without
    touching the outputs. ``tests/test_cpu_backend_asan_shapes.py`` runs every
    opcode this way on size-0, size-1 and odd shapes.
(c) A compile failure is a ``CompileError`` with the command, stderr and kept source.
(d) The cache: a second compile is a hit without running the compiler, also in
    a new process; a corrupted cached object is refused (``UnsafeCacheError`` at the hit, its hash
    record does not match; ``KernelError`` when loaded), not a crash (tests/test_kernel_cache_trust.py
    has the rest of the cache's trust checks).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import backends.toolchain as compiler_mod
import hlo
from backends.cpu import CodegenUnsupported, CompileError, CompilerOptions, KernelError, compiler_options_for
from backends.cpu.codegen import generate
from backends.cpu.pipeline import optimize
from backends.toolchain import compile_shared_object
from backends.cpu.runtime import Kernel
from backends.kernel_cache import UnsafeCacheError
from hlo.ir import HloModule
from tests.test_cpu_pooling_speed_forms import max_pool_hlo, pool_grad_hlo
from tests.test_cpu_row_programs import softmax_hlo
from tests.cpu_backend_util import (  # noqa: F401  (kernel_cache is a fixture)
    assert_matches, compile_text, gcc_supports_asan, kernel_cache, module, parse, random_args,
)

ADD = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%lt2 (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %c = s32[] parameter(2)
  %d = s32[] parameter(3)
  ROOT %r = pred[] compare(%a, %b), direction=LT
}
"""

SIMPLE = module("simple", ["x: f32[7,13]", "y: s32[5]", "s: f32[]"],
                ["  %b = f32[7,13] broadcast(%s), dimensions={}", "  %r0 = f32[7,13] add(%x, %b)",
                 "  %r1 = s32[5] negate(%y)"], [("r0", "f32[7,13]"), ("r1", "s32[5]")])


@pytest.fixture(scope="module")
def simple(kernel_cache):
    return compile_text(SIMPLE, kernel_cache)


# --- (a) dims, dtype, rank ----------------------------------------------------------------------


def _simple_args():
    return [np.ones((7, 13), np.float32), np.arange(5, dtype=np.int32), np.float32(2)]


def test_matching_dims_run(simple) -> None:
    out = simple(*_simple_args())
    np.testing.assert_array_equal(out[0], np.full((7, 13), 3, np.float32))
    np.testing.assert_array_equal(out[1], -np.arange(5, dtype=np.int32))


@pytest.mark.parametrize("k, bad, dim, got", [(0, np.ones((7, 12), np.float32), 1, 12),
                                              (0, np.ones((8, 13), np.float32), 0, 8),
                                              (1, np.zeros(0, np.int32), 0, 0)])
def test_wrong_dims_are_an_error_status(simple, k, bad, dim, got) -> None:
    args = _simple_args()
    args[k] = bad
    compiled_dims = [(7, 13), (5,)][k]  # the message names no parameter: names stay out of the source (cache key)
    with pytest.raises(KernelError, match=rf"^input {k}: dimension {dim} is {got}, but the kernel "
                                          rf"was compiled for {compiled_dims[dim]}"):
        simple(*args)


def test_raw_entry_point_checks_in_dims(simple) -> None:
    """Call ``tfxla_run`` directly with wrong ``in_dims``: status 1, a message, outputs untouched."""
    kernel: Kernel = simple.kernel
    args = [np.ascontiguousarray(a) for a in _simple_args()]
    outs = [np.full((7, 13), 7, np.float32), np.full(5, 7, np.int32)]
    scratch = np.zeros(int(kernel.signature["scratch_bytes"]) + 64, np.uint8)
    in_ptrs = (ctypes.c_void_p * 3)(*[a.ctypes.data for a in args])
    out_ptrs = (ctypes.c_void_p * 2)(*[o.ctypes.data for o in outs])
    err = ctypes.create_string_buffer(256)
    for dims, pattern in [((7, 13, 6), "input 1: dimension 0 is 6"),
                          ((7, 1 << 40, 5), "input 0: dimension 1 is 1099511627776")]:
        in_dims = (ctypes.c_int64 * 3)(*dims)
        status = kernel.lib.tfxla_run(kernel._state, in_ptrs, in_dims, out_ptrs,
                                      scratch.ctypes.data + (-scratch.ctypes.data) % 64, None, err, 256)
        assert status == 1
        assert pattern in err.value.decode()
        assert (outs[0] == 7).all() and (outs[1] == 7).all(), "a rejected call must not write its outputs"
    # A NULL state is refused too (tfxla_init was not called).
    in_dims = (ctypes.c_int64 * 3)(7, 13, 5)
    assert kernel.lib.tfxla_run(None, in_ptrs, in_dims, out_ptrs, None, None, err, 256) == 1
    assert "state is NULL" in err.value.decode()


def test_wrong_dtype_rank_and_arity_are_rejected_before_running(simple) -> None:
    x, y, s = _simple_args()
    with pytest.raises(TypeError, match=r"input 0: expected dtype f32 \(float32\), got float64"):
        simple(x.astype(np.float64), y, s)
    with pytest.raises(TypeError, match=r"input 1: expected dtype s32 \(int32\), got int64"):
        simple(x, y.astype(np.int64), s)
    with pytest.raises(ValueError, match=r"input 0: expected rank 2 \[7, 13\], got dims \[91\]"):
        simple(x.reshape(-1), y, s)
    with pytest.raises(ValueError, match=r"input 2: expected rank 0 \[\], got dims \[1\]"):
        simple(x, y, np.ones(1, np.float32))
    with pytest.raises(TypeError, match="kernel takes 3 input"):
        simple(x, y)


def test_signature_describes_the_abi(simple) -> None:
    sig = simple.kernel.signature
    assert sig["inputs"] == [{"dtype": "f32", "dims": [7, 13], "minor_to_major": [1, 0]},
                             {"dtype": "s32", "dims": [5], "minor_to_major": [0]},
                             {"dtype": "f32", "dims": [], "minor_to_major": []}]
    assert [o["dims"] for o in sig["outputs"]] == [[7, 13], [5]]
    assert simple.kernel.lib.tfxla_abi_version() == sig["abi_version"]
    simple.kernel.lib.tfxla_scratch_bytes.restype = ctypes.c_int64
    assert simple.kernel.lib.tfxla_scratch_bytes() == sig["scratch_bytes"]


def test_a_kernel_of_an_older_abi_is_refused_with_a_reason(kernel_cache, tmp_path) -> None:
    """A kernel built for ABI version 1 (``tfxla_run`` without the caller's runtime) must be recompiled."""
    source = generate(parse(SIMPLE)).source
    old = source.replace("int tfxla_abi_version(void) { return 2; }", "int tfxla_abi_version(void) { return 1; }")
    assert old != source
    so = compile_shared_object(old, CompilerOptions(), tmp_path, name="abi1").path
    with pytest.raises(KernelError, match=r"was built by an older tfxla \(kernel ABI version 1; this tfxla "
                                          r"speaks 2\) and must be recompiled"):
        Kernel(so)


# --- (b) AddressSanitizer -----------------------------------------------------------------------

ASAN_MODULES = {
    "reduce": module("asan_reduce", ["x: f32[181,191]", "y: f32[7,13]", "e: f32[0,3]"], [
        "  %z = f32[] constant(0)",
        "  %r0 = f32[181] reduce(%x, %z), dimensions={1}, to_apply=%add",
        "  %r1 = f32[191] reduce(%x, %z), dimensions={0}, to_apply=%add",
        "  %r2 = f32[] reduce(%x, %z), dimensions={0,1}, to_apply=%add",
        "  %r3 = f32[13] reduce(%y, %z), dimensions={0}, to_apply=%add",
        "  %r4 = f32[3] reduce(%e, %z), dimensions={0}, to_apply=%add"],
        [("r0", "f32[181]"), ("r1", "f32[191]"), ("r2", "f32[]"), ("r3", "f32[13]"), ("r4", "f32[3]")], ADD),
    "pad": module("asan_pad", ["x: f32[7,13]", "e: f32[0,3]", "v: f32[]"], [
        "  %r0 = f32[15,10] pad(%x, %v), padding=2_0_1x-3_0",
        "  %r1 = f32[2,5] pad(%e, %v), padding=1_1x1_1",
        "  %r2 = f32[9,9] pad(%x, %v), padding=-2_-2_1x-1_-3"],
        [("r0", "f32[15,10]"), ("r1", "f32[2,5]"), ("r2", "f32[9,9]")]),
    "gather": module("asan_gather", ["x: f32[7,13]", "i: s32[11,1]", "j: s32[5,2]"], [
        "  %r0 = f32[11,13] gather(%x, %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
        "index_vector_dim=1, slice_sizes={1,13}",
        "  %r1 = f32[5,3,4] gather(%x, %j), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, "
        "index_vector_dim=1, slice_sizes={3,4}"],
        [("r0", "f32[11,13]"), ("r1", "f32[5,3,4]")]),
    "scatter": module("asan_scatter", ["x: f32[7,13]", "i: s32[11,1]", "u: f32[11,13]", "j: s32[5,2]",
                                       "w: f32[5,3,4]"], [
        "  %r0 = f32[7,13] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0}, "
        "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add",
        "  %r1 = f32[7,13] scatter(%x, %j, %w), update_window_dims={1,2}, inserted_window_dims={}, "
        "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%add"],
        [("r0", "f32[7,13]"), ("r1", "f32[7,13]")], ADD),
    "sort": module("asan_sort", ["x: f32[7,13]", "i: s32[7,13]", "y: f32[1,1,17]", "k: s32[1,1,17]"], [
        "  %t0 = (f32[7,13], s32[7,13]) sort(%x, %i), dimensions={1}, to_apply=%lt2",
        "  %a = f32[7,13] get-tuple-element(%t0), index=0", "  %b = s32[7,13] get-tuple-element(%t0), index=1",
        "  %t1 = (f32[1,1,17], s32[1,1,17]) sort(%y, %k), dimensions={2}, to_apply=%lt2",
        "  %c = f32[1,1,17] get-tuple-element(%t1), index=0", "  %d = s32[1,1,17] get-tuple-element(%t1), index=1",
        "  %t2 = (f32[7,13], s32[7,13]) sort(%x, %i), dimensions={0}, to_apply=%lt2",
        "  %e = f32[7,13] get-tuple-element(%t2), index=0"],
        [("a", "f32[7,13]"), ("b", "s32[7,13]"), ("c", "f32[1,1,17]"), ("d", "s32[1,1,17]"), ("e", "f32[7,13]")],
        ADD),
    "dynamic_update_slice": module("asan_dus", ["x: f32[7,13]", "u: f32[3,5]", "i: s32[]", "j: s32[]",
                                                "k: s64[]", "l: s64[]"], [
        "  %r0 = f32[7,13] dynamic-update-slice(%x, %u, %i, %j)",
        "  %r1 = f32[3,5] dynamic-slice(%x, %j, %i), dynamic_slice_sizes={3,5}",
        "  %r2 = f32[7,13] dynamic-update-slice(%x, %u, %k, %l)"],
        [("r0", "f32[7,13]"), ("r1", "f32[3,5]"), ("r2", "f32[7,13]")]),
    # a row program (backends/cpu/row_program.py; the annotation from the CPU pipeline): rank 3, rows of 33
    "row_program": optimize(hlo.parse_module(softmax_hlo((3, 5, 33)))).to_text(),
    # NHWC pooling, 3x3/2 SAME (backends/cpu/select_scatter.py: split over the batch, channels innermost;
    # the unrolled reduce-window's clamped reads at the padding)
    "pool_grad": pool_grad_hlo((4, 13, 13, 24), 3, 2, True)[0],
    "pool": max_pool_hlo((2, 9, 8, 19), 3, 2, True),
}


def _asan_inputs(name: str, mod: HloModule) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    args = random_args(mod, seed=11)
    if name in ("gather", "scatter"):  # starts in [-4, 16): many windows start or end outside [0, 7) x [0, 13)
        args = [rng.integers(-4, 16, a.shape).astype(a.dtype) if a.dtype == np.int32 else a for a in args]
    if name == "dynamic_update_slice":  # starts far outside: clamped at both ends
        args[2:] = [np.int32(-5), np.int32(100), np.int64(1 << 40), np.int64(-(1 << 40))]
    if name == "sort":
        args = [np.round(a) if a.dtype == np.float32 else a for a in args]
    return args


HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tfxla_init(void** state, char* err, size_t errlen);
void tfxla_teardown(void* state);
int64_t tfxla_scratch_bytes(void);
int tfxla_run(void* state, const void* const* in, const int64_t* in_dims, void* const* out, char* scratch,
              const void* rt, char* err, size_t errlen);

static void* exact(size_t n) {  /* ASan puts a redzone right after the n requested bytes */
  void* p = NULL;
  if (posix_memalign(&p, 64, n ? n : 1)) exit(3);
  return p;
}

int main(int argc, char** argv) {
  const int bad = argc > 1 && strcmp(argv[1], "baddims") == 0;
  const int invalid = argc > 1 && strcmp(argv[1], "invalid") == 0;  /* the data must be refused: status 3 */
  void* in[NIN + 1];
  void* out[NOUT + 1];
  for (int k = 0; k < NIN; ++k) {
    in[k] = exact(IN_BYTES[k]);
    if (fread(in[k], 1, IN_BYTES[k], stdin) != IN_BYTES[k]) { fprintf(stderr, "short input %d\n", k); return 4; }
  }
  for (int k = 0; k < NOUT; ++k) { out[k] = exact(OUT_BYTES[k]); memset(out[k], 0xAB, OUT_BYTES[k]); }
  char* scratch = (char*)exact((size_t)tfxla_scratch_bytes());
  char err[512];
  void* state = NULL;
  if (tfxla_init(&state, err, sizeof err)) { fprintf(stderr, "init failed: %s\n", err); return 5; }
  int64_t dims[] = IN_DIMS;
  if (bad) dims[BAD_DIM] += 1;
  const int status = tfxla_run(state, (const void* const*)in, dims, out, scratch, NULL, err, sizeof err);
  if (bad) {
    if (status == 0) { fprintf(stderr, "wrong dims were accepted\n"); return 6; }
    for (int k = 0; k < NOUT; ++k)
      for (size_t b = 0; b < OUT_BYTES[k]; ++b)
        if (((unsigned char*)out[k])[b] != 0xAB) { fprintf(stderr, "output %d written\n", k); return 7; }
    printf("%s", err);
  } else if (invalid) {
    if (status != 3) { fprintf(stderr, "expected status 3 (invalid argument), got %d: %s\n", status, err); return 9; }
    printf("%s", err);
    if (argc > 2 && strcmp(argv[2], "outputs") == 0) {  /* then a NUL and the outputs as the refusal left them */
      putchar(0);
      for (int k = 0; k < NOUT; ++k) fwrite(out[k], 1, OUT_BYTES[k], stdout);
    }
  } else {
    if (status != 0) { fprintf(stderr, "run failed: %s\n", err); return 8; }
    for (int k = 0; k < NOUT; ++k) fwrite(out[k], 1, OUT_BYTES[k], stdout);
  }
  tfxla_teardown(state);
  for (int k = 0; k < NIN; ++k) free(in[k]);
  for (int k = 0; k < NOUT; ++k) free(out[k]);
  free(scratch);
  return 0;
}
"""


def harness_source(signature: dict) -> str:
    """The harness for a kernel's signature: buffer sizes, dims, and which dim the bad run changes."""
    def nbytes(entry):
        itemsize = hlo.PrimitiveType.from_text(entry["dtype"]).numpy.itemsize
        return int(np.prod(entry["dims"], dtype=np.int64)) * itemsize
    ins, outs = signature["inputs"], signature["outputs"]
    dims = [d for e in ins for d in e["dims"]]
    defs = [f"#define NIN {len(ins)}", f"#define NOUT {len(outs)}",
            f"static const size_t IN_BYTES[] = {{{', '.join(str(nbytes(e)) for e in ins) or '0'}}};",
            f"static const size_t OUT_BYTES[] = {{{', '.join(str(nbytes(e)) for e in outs) or '0'}}};",
            f"#define IN_DIMS {{{', '.join(map(str, dims)) or '0'}}}", "#define BAD_DIM 0"]
    return HARNESS.replace("int main", "\n".join(defs) + "\n\nint main", 1)


ASAN_FLAGS = CompilerOptions(sanitize=("address",), extra_flags=("-fno-omit-frame-pointer", "-g"))


def rpath_links(options: CompilerOptions) -> list[str]:
    """Where the linker finds what the kernel's libraries need (oneDNN's TBB build: libtbb, libimf beside
    it): an executable's link resolves them, a shared object's does not."""
    return [f"-Wl,-rpath-link,{d}" for d in options.library_dirs]


def build_asan_harness(name: str, text: str, directory: Path, cache: Path) -> tuple[HloModule, Path]:
    """The kernel as an ASan-instrumented shared object (through the cache), linked into its harness."""
    mod = parse(text)
    generated = generate(mod)
    options = compiler_options_for(generated, ASAN_FLAGS)
    so = compile_shared_object(generated.source, options, cache, name=mod.name).path
    harness = directory / f"{name}_harness.c"
    harness.write_text(harness_source(generated.signature))
    exe = directory / f"{name}_harness"
    cmd = [options.cc, "-fsanitize=address", "-fno-omit-frame-pointer", "-g", str(harness), str(so),
           f"-Wl,-rpath,{so.parent}", *rpath_links(options), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"linking the harness failed: {' '.join(cmd)}\n{proc.stderr}"
    return mod, exe


@pytest.fixture(scope="module")
def asan_harnesses(kernel_cache, tmp_path_factory):
    ok, stderr = gcc_supports_asan()
    assert ok, ("gcc cannot link -fsanitize=address: install libasan (Debian: apt-get install libasan8, "
                f"which gcc-12's libgcc-12-dev depends on)\n{stderr}")
    directory = tmp_path_factory.mktemp("asan")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(build_asan_harness, name, text, directory, kernel_cache)
                   for name, text in ASAN_MODULES.items()}
        return {name: f.result() for name, f in futures.items()}


ASAN_ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:allocator_may_return_null=0"}


def _run_harness(exe: Path, args: list[np.ndarray], *flags: str) -> subprocess.CompletedProcess:
    data = b"".join(np.ascontiguousarray(a).tobytes() for a in args)
    return subprocess.run([str(exe), *flags], input=data, capture_output=True, env=ASAN_ENV, timeout=120)


@pytest.mark.parametrize("name", list(ASAN_MODULES))
def test_kernel_is_clean_under_address_sanitizer(name: str, asan_harnesses) -> None:
    mod, exe = asan_harnesses[name]
    args = _asan_inputs(name, mod)
    proc = _run_harness(exe, args)
    stderr = proc.stderr.decode(errors="replace")
    assert "ERROR: AddressSanitizer" not in stderr and "ERROR: LeakSanitizer" not in stderr, stderr
    assert proc.returncode == 0, stderr
    want = hlo.evaluate(mod, *args)
    got, offset = [], 0
    for w in want:
        n = w.size * w.dtype.itemsize
        got.append(np.frombuffer(proc.stdout[offset:offset + n], w.dtype).reshape(w.shape))
        offset += n
    assert offset == len(proc.stdout), "the harness printed more bytes than the outputs hold"
    assert_matches(got, want, atol=2e-4 if name == "reduce" else None, what=f"asan {name}")


def test_harness_catches_an_out_of_bounds_write(kernel_cache, tmp_path) -> None:
    """The harness is not vacuous: a kernel that writes one byte past its first output is caught."""
    mod = parse(SIMPLE)
    generated = generate(mod)
    entry = "TFXLA_EXPORT int tfxla_run(void* state"
    assert generated.source.count(entry) == 1
    source = generated.source.replace(entry, "static int tfxla_run_ok(void* state") + (
        "\nTFXLA_EXPORT int tfxla_run(void* state, const void* const* in, const int64_t* in_dims, "
        "void* const* out, char* scratch, const tfxla_runtime* rt, char* err, size_t errlen) {\n"
        "  int status = tfxla_run_ok(state, in, in_dims, out, scratch, rt, err, errlen);\n"
        f"  ((volatile char*)out[0])[{7 * 13 * 4}] = 1;\n  return status;\n}}\n")
    options = compiler_options_for(generated, ASAN_FLAGS)
    so = compile_shared_object(source, options, tmp_path, name="oob").path
    harness = tmp_path / "oob_harness.c"
    harness.write_text(harness_source(generated.signature))
    exe = tmp_path / "oob_harness"
    subprocess.run([options.cc, "-fsanitize=address", str(harness), str(so), f"-Wl,-rpath,{so.parent}",
                    *rpath_links(options), "-o", str(exe)], check=True, capture_output=True)
    proc = _run_harness(exe, _simple_args())
    assert proc.returncode != 0
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in proc.stderr.decode(errors="replace")


def test_wrong_dims_under_address_sanitizer(asan_harnesses) -> None:
    mod, exe = asan_harnesses["gather"]
    proc = _run_harness(exe, _asan_inputs("gather", mod), "baddims")
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0 and "AddressSanitizer" not in stderr, stderr
    assert proc.stdout.decode() == "input 0: dimension 0 is 8, but the kernel was compiled for 7"


# --- (c) CompileError ---------------------------------------------------------------------------


def test_broken_source_is_a_compile_error_with_command_stderr_and_source(tmp_path) -> None:
    source = "int tfxla_broken(void) { return undeclared_name; }\n"
    with pytest.raises(CompileError) as info:
        compile_shared_object(source, cache_dir=tmp_path, name="broken")
    e = info.value
    assert e.command[0] == CompilerOptions().cc and "-shared" in e.command
    assert "undeclared_name" in e.stderr and "error" in e.stderr
    assert Path(e.source_path).read_text() == source, "the failing source is kept for inspection"
    assert e.source_path in e.command
    assert "undeclared_name" in str(e) and e.source_path in str(e)
    assert not list(tmp_path.rglob("*.so")), "a failed compile leaves no shared object, not even a temporary"


def test_missing_compiler_is_a_compile_error(tmp_path) -> None:
    options = CompilerOptions(cc=str(tmp_path / "no-such-cc"))
    with pytest.raises(CompileError, match="cannot run the C compiler") as info:
        compile_shared_object("int x;\n", options, cache_dir=tmp_path)
    assert info.value.command[0] == options.cc


def test_codegen_unsupported_is_not_a_compile_error(kernel_cache) -> None:
    text = module("f8", ["a: f32[3]"], ["  %r0 = f8e4m3fn[3] convert(%a)"], [("r0", "f8e4m3fn[3]")])
    with pytest.raises(CodegenUnsupported, match="element type f8e4m3fn"):
        compile_text(text, kernel_cache)


# --- (d) the cache ------------------------------------------------------------------------------

CACHED = module("cached", ["x: f32[9]"], ["  %r0 = f32[9] sine(%x)"], [("r0", "f32[9]")])


def test_second_compile_is_a_cache_hit_without_the_compiler(tmp_path, monkeypatch) -> None:
    first = compile_text(CACHED, tmp_path)
    assert not first.cache_hit
    so_files = list(tmp_path.rglob("*.so"))
    assert len(so_files) == 1 and so_files[0].parent.name == so_files[0].stem[:2]

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"the compiler ran on a warm cache: {args}")
    monkeypatch.setattr(compiler_mod.subprocess, "run", no_compiler)
    second = compile_text(CACHED, tmp_path)
    assert second.cache_hit
    x = np.linspace(-3, 3, 9, dtype=np.float32)
    np.testing.assert_allclose(second(x)[0], np.sin(x), rtol=1e-6, atol=1e-7)


def test_new_process_hits_the_cache(tmp_path) -> None:
    compile_text(CACHED, tmp_path)
    code = ("import json, sys, hlo, backends.cpu as cpu\n"
            "exe = cpu.compile(hlo.parse_module(sys.stdin.read()), cpu.CompileOptions(cache_dir=sys.argv[1]))\n"
            "print(json.dumps({'hit': exe.cache_hit}))\n")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], input=CACHED, capture_output=True, text=True,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"hit": True}


@pytest.mark.parametrize("keep", [0, 100, "half"])
def test_corrupt_cached_object_is_a_kernel_error(tmp_path, keep) -> None:
    mod = parse(CACHED.replace("sine", "cosine"))
    generated = generate(mod)
    so = compile_shared_object(generated.source, compiler_options_for(generated), tmp_path).path  # not loaded yet
    size = so.stat().st_size
    with open(so, "r+b") as f:
        f.truncate(size // 2 if keep == "half" else keep)
    with pytest.raises(UnsafeCacheError, match=f"kernel cache entry {so} has sha256 .* refusing to use it"):
        compile_text(mod, tmp_path)  # the hit is checked against its record
    with pytest.raises(KernelError, match=f"cannot load kernel {so}: .* changed after it was built"):
        Kernel(so)  # and so is every load
    Path(f"{so}.sha256").unlink()  # no record: the ELF check still stands before dlopen
    with pytest.raises(KernelError, match=f"cannot load kernel {so}: {so}: (not a 64-bit|truncated) "):
        Kernel(so)
