"""The TfxlaLaunch custom op (tfxla_plugin/ops/tfxla_launch.cc) and its loader (tfxla_plugin/_op.py).

* Numbers: HLO modules compiled by the CPU backend, run through the op eagerly and inside a
  tf.function, against ``hlo.evaluate``; static output shapes through shape inference.
* The ABI: hand-written C kernels (``_abi_kernel``) probe what the op passes (the concatenated
  input dims, a 64-byte aligned scratch arena, one tfxla_init per path) and what it does with a
  failing kernel, a wrong ABI version, a failing init, a bad signature, a non-row-major layout.
* Errors: wrong dtype, rank, dims or input count, a hash mismatch (the file is never dlopen'ed),
  a missing file; each a TF error naming the input or the file, and the kernel is not called.
* In a fresh process (so a crash cannot take pytest down): ``import tfxla_plugin`` registers the
  op, truncated/empty/garbage .so files, /dev/zero and FIFOs (as kernels or C sources) give clear
  errors at once, and a SavedModel whose kernel path is an Asset loads from a moved directory.

tests/test_launch_op_trust.py has the op's trust checks (what it loads, rebuilt kernels, its own cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import hlo
from backends.cpu import CompileOptions, compile as compile_module
from hlo.dtypes import PrimitiveType
from tfxla_plugin import _op

REPO = Path(__file__).resolve().parent.parent

ADD_F32 = "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
MODULES = {
    "elementwise_f32": """HloModule ew
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  s = f32[2,3] add(x, y)
  ROOT m = f32[2,3] multiply(s, x)
}""",
    "reduce": f"""HloModule red
{ADD_F32}ENTRY e {{
  x = f32[4,5] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(x, z), dimensions={{1}}, to_apply=add_f32
}}""",
    "tuple_mixed": """HloModule tup
ENTRY e {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  s = f32[3] add(x, y)
  c = pred[3] compare(x, y), direction=LT
  i = s32[3] convert(x)
  ROOT t = (f32[3], pred[3], s32[3]) tuple(s, c, i)
}""",
    "int32": """HloModule i32
ENTRY e {
  x = s32[2,2] parameter(0)
  y = s32[2,2] parameter(1)
  m = s32[2,2] multiply(x, y)
  ROOT d = s32[2,2] subtract(m, y)
}""",
    "bool": """HloModule pred
ENTRY e {
  a = pred[4] parameter(0)
  b = pred[4] parameter(1)
  o = pred[4] or(a, b)
  n = pred[4] not(b)
  ROOT r = pred[4] and(o, n)
}""",
    "wide_types": """HloModule wide
ENTRY e {
  x = f64[3] parameter(0)
  y = s64[3] parameter(1)
  h = f16[3] parameter(2)
  c = f64[3] convert(y)
  s = f64[3] add(x, c)
  hf = f64[3] convert(h)
  a = f64[3] add(s, hf)
  u = u8[3] convert(y)
  b = bf16[3] convert(x)
  ROOT t = (f64[3], u8[3], bf16[3]) tuple(a, u, b)
}""",
    "scratch": f"""HloModule scr
{ADD_F32}ENTRY e {{
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  d = f32[8,4] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  z = f32[] constant(0)
  r = f32[8] reduce(d, z), dimensions={{1}}, to_apply=add_f32
  b = f32[8,4] broadcast(r), dimensions={{0}}
  ROOT o = f32[8,4] subtract(d, b)
}}""",
    "no_inputs": """HloModule cst
ENTRY e {
  ROOT c = f32[2] constant({1, 2})
}""",
    "scalar_add_one": """HloModule plus1
ENTRY e {
  x = f32[] parameter(0)
  one = f32[] constant(1)
  ROOT r = f32[] add(x, one)
}""",
}


@pytest.fixture(scope="module")
def op():
    return _op.load_op_library()


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """name -> (module, executable, path, sha256) for every module of MODULES."""
    cache = tmp_path_factory.mktemp("launch_kernels")
    out = {}
    for name, text in MODULES.items():
        module = hlo.parse_module(text)
        exe = compile_module(module, CompileOptions(cache_dir=str(cache)))
        path = str(exe.path)
        out[name] = (module, exe, path, hashlib.sha256(Path(path).read_bytes()).hexdigest())
    return out


def _tf_dtype(hlo_type: str) -> tf.DType:
    return tf.as_dtype(PrimitiveType.from_text(hlo_type).numpy)


def launch(op, kernel, args, *, cluster="c", kernel_hash=None, tin=None):
    """Call the op with Tout/output_shapes taken from the kernel's signature."""
    _, exe, path, sha = kernel
    outs = exe.generated.signature["outputs"]
    return op.tfxla_launch(kernel_path=path, args=list(args), Tout=[_tf_dtype(o["dtype"]) for o in outs],
                           output_shapes=[o["dims"] for o in outs], cluster=cluster,
                           kernel_hash=sha if kernel_hash is None else kernel_hash)


def random_args(module, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for p in module.entry.parameters:
        dt, dims = p.shape.dtype, p.shape.dims
        if dt is PrimitiveType.PRED:
            args.append(rng.integers(0, 2, dims).astype(bool))
        elif dt.is_float:
            args.append(rng.uniform(-3, 3, dims).astype(dt.numpy))
        else:
            args.append(rng.integers(-20, 20, dims).astype(dt.numpy))
    return args


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            rtol = 1e-5 if w.dtype.itemsize >= 4 else 8e-3  # f16/bf16: one ulp of the narrow type
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


# --- numbers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODULES))
def test_eager_matches_evaluator(op, kernels, name):
    module = kernels[name][0]
    args = random_args(module)
    assert_close([t.numpy() for t in launch(op, kernels[name], args)], hlo.evaluate(module, *args))


@pytest.mark.parametrize("name", ["elementwise_f32", "tuple_mixed", "scratch", "no_inputs"])
def test_tf_function_matches_evaluator_with_static_shapes(op, kernels, name):
    module = kernels[name][0]
    args = random_args(module, seed=1)
    fn = tf.function(lambda *a: launch(op, kernels[name], a))
    concrete = fn.get_concrete_function(*[tf.TensorSpec(a.shape, a.dtype) for a in args])
    for out, sig in zip(concrete.outputs, kernels[name][1].generated.signature["outputs"]):
        assert out.shape.as_list() == sig["dims"]
    assert_close([t.numpy() for t in fn(*args)], hlo.evaluate(module, *args))


def test_partially_known_output_shape_is_accepted(op, kernels):
    module, exe, path, sha = kernels["elementwise_f32"]
    args = random_args(module)
    out = op.tfxla_launch(kernel_path=path, args=args, Tout=[tf.float32], output_shapes=[[None, 3]],
                          cluster="c", kernel_hash="")
    assert_close([out[0].numpy()], hlo.evaluate(module, *args))


def test_concurrent_calls_share_one_kernel(op, kernels):
    module = kernels["scratch"][0]
    fn = tf.function(lambda *a: launch(op, kernels["scratch"], a))
    inputs = [random_args(module, seed=s) for s in range(8)]
    expected = [hlo.evaluate(module, *a) for a in inputs]
    failures = []

    def work(k):
        for _ in range(30):
            got = [t.numpy() for t in fn(*inputs[k])]
            if not all(np.allclose(g, w, rtol=1e-5, atol=1e-5) for g, w in zip(got, expected[k])):
                failures.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# --- errors on the arguments: the kernel is never called -----------------------------------------
def test_wrong_dtype_names_the_input(op, kernels):
    module = kernels["elementwise_f32"][0]
    x = np.ones((2, 3), np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input 0 has dtype int32, but the kernel was "
                                                             r"compiled for f32\[2,3\]"):
        launch(op, kernels["elementwise_f32"], [x, x])


@pytest.mark.parametrize("shape", [(6,), (2, 3, 1), (3, 2), (2, 4)])
def test_wrong_shape_names_input_expected_and_actual(op, kernels, shape):
    x = np.ones((2, 3), np.float32)
    bad = np.ones(shape, np.float32)
    actual = ",".join(map(str, shape))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"cluster 'c7': input 1 has shape float\[{actual}\], but kernel 'ew' \(.*\.so\) "
                             rf"was compiled for f32\[2,3\] \(rank 2\)"):
        launch(op, kernels["elementwise_f32"], [x, bad], cluster="c7")


def test_variable_handles_are_read_by_the_op(op, kernels):
    """A DT_RESOURCE argument is the variable's value, read when the op runs (the eager single-launch
    path passes handles); a variable of another dtype or shape is refused by name, like a tensor."""
    module = kernels["elementwise_f32"][0]
    x, y = random_args(module)
    v = tf.Variable(y)
    assert_close(launch(op, kernels["elementwise_f32"], [tf.constant(x), v.handle]), hlo.evaluate(module, x, y))
    v.assign(y * 2.0)  # read at the call, not captured earlier
    assert_close(launch(op, kernels["elementwise_f32"], [tf.constant(x), v.handle]), hlo.evaluate(module, x, y * 2.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input 1 is a variable of dtype int32, but kernel "
                                                             r"'ew' \(.*\) was compiled for f32\[2,3\]"):
        launch(op, kernels["elementwise_f32"], [tf.constant(x), tf.Variable(np.ones((2, 3), np.int32)).handle])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input 1 has shape float\[3,2\], but kernel 'ew'"):
        launch(op, kernels["elementwise_f32"], [tf.constant(x), tf.Variable(np.ones((3, 2), np.float32)).handle])


def test_wrong_input_count_and_output_declarations(op, kernels):
    _, _, path, _ = kernels["elementwise_f32"]
    x = np.ones((2, 3), np.float32)
    call = dict(kernel_path=path, cluster="c", kernel_hash="")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"takes 2 input\(s\), but the op passes 1"):
        op.tfxla_launch(args=[x], Tout=[tf.float32], output_shapes=[[2, 3]], **call)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"output 0 is declared int32"):
        op.tfxla_launch(args=[x, x], Tout=[tf.int32], output_shapes=[[2, 3]], **call)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"output 0 is declared with shape \[3,2\]"):
        op.tfxla_launch(args=[x, x], Tout=[tf.float32], output_shapes=[[3, 2]], **call)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"returns 1 output\(s\), but the op declares 2"):
        op.tfxla_launch(args=[x, x], Tout=[tf.float32] * 2, output_shapes=[[2, 3]] * 2, **call)
    with pytest.raises(tf.errors.InvalidArgumentError, match="kernel_path must be a scalar string"):
        op.tfxla_launch(kernel_path=[path], args=[x, x], Tout=[tf.float32], output_shapes=[[2, 3]],
                        cluster="c", kernel_hash="")


def test_graph_shape_inference_rejects_mismatched_output_shapes(op):
    with pytest.raises(ValueError, match="output_shapes"):
        tf.function(lambda: op.tfxla_launch(kernel_path="k.so", args=[], Tout=[tf.float32], output_shapes=[],
                                            cluster="c", kernel_hash="")).get_concrete_function()


def test_missing_file_names_it_and_a_later_fix_works(op, kernels, tmp_path):
    path = tmp_path / "later.so"
    call = dict(kernel_path=str(path), args=[np.float32(1)], Tout=[tf.float32], output_shapes=[[]],
                cluster="c", kernel_hash="")
    with pytest.raises(tf.errors.NotFoundError, match=re.escape(f"tfxla kernel file '{path}' not found")):
        op.tfxla_launch(**call)
    shutil.copy(kernels["scalar_add_one"][2], path)  # failures are not cached
    assert op.tfxla_launch(**call)[0].numpy() == 2.0


# --- hand-written kernels probing the ABI ---------------------------------------------------------
# The ABI 2 runtime struct, as tfxla_plugin/ops/parallel.h and the generated CPU prelude declare it.
RUNTIME_C = """\
#include <stddef.h>
#include <stdint.h>
typedef void (*tfxla_task_fn)(void* ctx, int64_t begin, int64_t end);
typedef struct tfxla_runtime {
  int64_t struct_size;
  int64_t num_threads;
  void* pool;
  void (*parallel_for)(void* pool, int64_t n, tfxla_task_fn fn, void* ctx);
} tfxla_runtime;
"""


def _abi_kernel(tmp: Path, name: str, signature, run: str, *, abi: int = 2, init: str = "", extra: str = "") -> str:
    """A hand-written kernel of ABI version ``abi`` (its ``tfxla_run`` sees ``rt``: the op's runtime)."""
    sig_text = signature if isinstance(signature, str) else json.dumps(signature)
    scratch = signature["scratch_bytes"] if isinstance(signature, dict) else 0
    src = tmp / f"{name}.c"
    src.write_text(RUNTIME_C + textwrap.dedent(f"""\
        #include <stdio.h>
        #include <string.h>
        static int inits, runs;
        {extra}
        int tfxla_abi_version(void) {{ return {abi}; }}
        const char* tfxla_signature(void) {{ return {json.dumps(sig_text)}; }}
        int64_t tfxla_scratch_bytes(void) {{ return {scratch}; }}
        int tfxla_init(void** state, char* err, size_t errlen) {{
          (void)err; (void)errlen; *state = &inits; ++inits; {init} return 0; }}
        void tfxla_teardown(void* state) {{ (void)state; }}
        int tfxla_run(void* state, const void* const* in, const int64_t* in_dims, void* const* out,
                      char* scratch, const tfxla_runtime* rt, char* err, size_t errlen) {{
          (void)state; (void)in; (void)in_dims; (void)out; (void)scratch; (void)rt; (void)err; (void)errlen;
          ++runs; {run} }}
        """))
    so = tmp / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", str(src), "-o", str(so)], check=True)
    return str(so)


def _spec(dtype, dims):
    return {"dtype": dtype, "dims": dims, "minor_to_major": list(range(len(dims) - 1, -1, -1))}


SCALAR_SIG = {"abi_version": 2, "module": "scalar", "inputs": [_spec("f32", [])], "outputs": [_spec("f32", [])],
              "scratch_bytes": 0}
COPY_SCALAR = "*(float*)out[0] = *(const float*)in[0]; return 0;"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """x: f32[2,3], y: s32[4] -> (s64[6]: in_dims[0..2], scratch aligned, inits, runs; f32[]: sum)."""
    sig = {"abi_version": 2, "module": "probe", "inputs": [_spec("f32", [2, 3]), _spec("s32", [4])],
           "outputs": [_spec("s64", [6]), _spec("f32", [])], "scratch_bytes": 1000}
    run = """
      int64_t* o = (int64_t*)out[0];
      memset(scratch, 0xAB, 1000);
      o[0] = in_dims[0]; o[1] = in_dims[1]; o[2] = in_dims[2];
      o[3] = ((uintptr_t)scratch % 64) == 0; o[4] = inits; o[5] = runs;
      float s = 0; const float* x = (const float*)in[0]; const int32_t* y = (const int32_t*)in[1];
      for (int i = 0; i < 6; ++i) s += x[i];
      for (int i = 0; i < 4; ++i) s += (float)y[i];
      *(float*)out[1] = s; return 0;"""
    return _abi_kernel(tmp_path_factory.mktemp("abi"), "probe", sig, run)


def _call_probe(op, path, x, y, cluster="p"):
    return op.tfxla_launch(kernel_path=path, args=[x, y], Tout=[tf.int64, tf.float32], output_shapes=[[6], []],
                           cluster=cluster, kernel_hash="")


def test_abi_dims_scratch_and_one_init_per_path(op, probe):
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(4, dtype=np.int32)
    first = _call_probe(op, probe, x, y)[0].numpy()
    for cluster in ("p", "q", "r"):  # other op instances (other attrs) share the loaded kernel
        info, total = _call_probe(op, probe, x, y, cluster)
    info = info.numpy()
    assert list(info[:3]) == [2, 3, 4] and info[3] == 1  # concatenated dims; 64-byte aligned scratch
    assert info[4] == 1 and info[5] == first[5] + 3  # tfxla_init ran once for the path
    assert total.numpy() == 15 + 6
    with pytest.raises(tf.errors.InvalidArgumentError, match="input 1 has shape int32\\[5\\]"):
        _call_probe(op, probe, x, np.arange(5, dtype=np.int32))
    assert _call_probe(op, probe, x, y)[0].numpy()[5] == info[5] + 1  # the rejected call never ran


def test_kernel_error_status_is_a_tf_error_and_the_kernel_stays_usable(op, tmp_path):
    sig = {**SCALAR_SIG, "module": "fails"}
    run = ('float x = *(const float*)in[0];\n'
           'if (x < 0) { snprintf(err, errlen, "injected failure: x=%g", x); return 7; }\n' + COPY_SCALAR)
    path = _abi_kernel(tmp_path, "fails", sig, run)
    call = dict(kernel_path=path, Tout=[tf.float32], output_shapes=[[]], cluster="cf", kernel_hash="")
    with pytest.raises(tf.errors.InternalError,
                       match=r"cluster 'cf': kernel 'fails' \(.*fails\.so\) failed \(status 7\): injected failure: x=-2"):
        op.tfxla_launch(args=[np.float32(-2)], **call)
    assert op.tfxla_launch(args=[np.float32(5)], **call)[0].numpy() == 5.0


@pytest.mark.parametrize("case, error, message", [
    ("abi1", tf.errors.FailedPreconditionError, r"has ABI version 1: it was built by an older tfxla and must be "
                                                r"recompiled .*a wrapped SavedModel: wrap it again"),
    ("abi3_no_shapes", tf.errors.InvalidArgumentError, "is not a tfxla kernel: missing symbol tfxla_shapes"),
    ("abi4", tf.errors.FailedPreconditionError, "has ABI version 4, but this TfxlaLaunch op speaks versions 2 and "
                                                "3: it was built by a newer tfxla"),
    ("init_fails", tf.errors.FailedPreconditionError, "tfxla_init failed: no license"),
    ("no_symbols", tf.errors.InvalidArgumentError, "is not a tfxla kernel: missing symbol tfxla_abi_version"),
    ("bad_json", tf.errors.InvalidArgumentError, "cannot parse its signature"),
    ("column_major", tf.errors.UnimplementedError, r"inputs\[0\] has a non-row-major layout"),
    ("int4_dtype", tf.errors.UnimplementedError, "element type s4, which the TfxlaLaunch op does not support"),
])
def test_bad_kernels_are_refused_by_name(op, tmp_path, case, error, message):
    kw: dict = {}
    sig = {**SCALAR_SIG, "module": case}
    if case in ("abi1", "abi4"):
        kw["abi"] = int(case[-1])
    elif case == "abi3_no_shapes":  # symbolic dims (ABI 3) need tfxla_shapes
        kw["abi"], sig["abi_version"] = 3, 3
    elif case == "init_fails":
        kw["init"] = 'snprintf(err, errlen, "no license"); return 1;'
    elif case == "bad_json":
        sig = '{"abi_version": 2, "inputs": [{'
    elif case == "column_major":
        sig["inputs"] = [{"dtype": "f32", "dims": [2, 3], "minor_to_major": [0, 1]}]
    elif case == "int4_dtype":
        sig["inputs"] = [_spec("s4", [])]
    if case == "no_symbols":
        (tmp_path / "no_symbols.c").write_text("int foo(void) { return 0; }\n")
        path = str(tmp_path / "no_symbols.so")
        subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "no_symbols.c"), "-o", path], check=True)
    else:
        path = _abi_kernel(tmp_path, case, sig, COPY_SCALAR, **kw)
    with pytest.raises(error, match=message) as info:
        op.tfxla_launch(kernel_path=path, args=[np.float32(1)], Tout=[tf.float32], output_shapes=[[]],
                        cluster="c", kernel_hash="")
    assert path in info.value.message


def test_hash_mismatch_refuses_without_loading(op, tmp_path):
    marker = tmp_path / "loaded.marker"
    extra = (f'__attribute__((constructor)) static void mark(void) {{ FILE* f = fopen("{marker}", "w"); '
             f'if (f) fclose(f); }}')
    path = _abi_kernel(tmp_path, "marked", {**SCALAR_SIG, "module": "marked"}, COPY_SCALAR, extra=extra)
    sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    call = dict(kernel_path=path, args=[np.float32(3)], Tout=[tf.float32], output_shapes=[[]], cluster="c")
    with pytest.raises(tf.errors.DataLossError, match=re.escape(f"'{path}' has sha256 {sha}, but the graph was "
                                                                f"built for sha256 {'0' * 64}")):
        op.tfxla_launch(kernel_hash="0" * 64, **call)
    assert not marker.exists()  # never dlopen'ed
    assert op.tfxla_launch(kernel_hash=sha, **call)[0].numpy() == 3.0
    assert marker.exists()
    with pytest.raises(tf.errors.DataLossError, match="refusing to run it"):  # also once loaded
        op.tfxla_launch(kernel_hash="f" * 64, **call)


# --- a fresh process: registration on import, damaged files, a SavedModel with an Asset -----------
CHILD = """
import json, sys
import tfxla_plugin  # registers TfxlaLaunch
import tensorflow as tf
from tensorflow.python.framework import op_def_registry
print(json.dumps({"registered": [op_def_registry.get("TfxlaLaunch") is not None, ""]}), flush=True)
cases, saved = json.loads(sys.argv[1]), sys.argv[2]
op = tfxla_plugin._op.load_op_library()
for name, case in cases.items():
    kw = case if isinstance(case, dict) else {"kernel_path": case}
    try:
        r = op.tfxla_launch(args=[tf.constant(1.0)], Tout=[tf.float32], output_shapes=[[]], cluster="c",
                            kernel_hash="", **kw)
        result = ["ok", str(r[0].numpy())]
    except tf.errors.OpError as e:
        result = [type(e).__name__, e.message]
    print(json.dumps({name: result}), flush=True)
print(json.dumps({"saved_model": ["ok", str(tf.saved_model.load(saved)(tf.constant(41.0)).numpy())]}), flush=True)
"""


@pytest.fixture(scope="module")
def child(op, kernels, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("child")
    good = Path(kernels["scalar_add_one"][2])
    data = good.read_bytes()
    (tmp / "truncated.so").write_bytes(data[: len(data) // 2])
    (tmp / "header_only.so").write_bytes(data[:64])
    (tmp / "empty.so").write_bytes(b"")
    (tmp / "garbage.so").write_text("this is not an ELF file\n")
    (tmp / "tail_cut.so").write_bytes(data[:-16])
    for k in range(1, 10):  # a sweep of cut points: dlopen itself dies of SIGBUS on most of them
        (tmp / f"cut{k}.so").write_bytes(data[: len(data) * k // 10])
    damaged = ["truncated", "header_only", "empty", "garbage", "tail_cut"] + [f"cut{k}" for k in range(1, 10)]
    cases = {n: str(tmp / f"{n}.so") for n in damaged}
    cases["directory"] = str(tmp)
    cases["good"] = str(good)
    # Hostile files, last (each used to abort or hang the process): /dev/zero and FIFOs as kernels and
    # as the source a kernel would be rebuilt from.
    os.mkfifo(tmp / "fifo.so")
    (tmp / "fifo_source.so").write_bytes(b"garbage")
    os.mkfifo(tmp / "fifo_source.c")
    (tmp / "zero_source.so").write_bytes(b"garbage")
    (tmp / "zero_source.c").symlink_to("/dev/zero")
    rebuild = {"kernel_hashes": ["0" * 64], "source_hashes": ["0" * 64], "source_suffix": ".c",
               "rebuild_commands": [json.dumps(["cp", "{source}", "{output}"])]}
    cases.update({"dev_zero": "/dev/zero", "fifo": str(tmp / "fifo.so"),
                  "dev_zero_rebuild": {"kernel_path": "/dev/zero", **rebuild},
                  "fifo_rebuild": {"kernel_path": str(tmp / "fifo.so"), **rebuild},
                  "fifo_source": {"kernel_path": str(tmp / "fifo_source.so"), **rebuild},
                  "zero_source": {"kernel_path": str(tmp / "zero_source.so"), **rebuild}})

    # A SavedModel whose kernel is an Asset; the kernel's original file is gone and the directory moved.
    kernel_copy = tmp / "kernel_copy.so"
    shutil.copy(good, kernel_copy)
    sha = kernels["scalar_add_one"][3]

    class Plus1(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.saved_model.Asset(str(kernel_copy))

        @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
        def __call__(self, x):
            return op.tfxla_launch(kernel_path=self.kernel.asset_path, args=[x], Tout=[tf.float32],
                                   output_shapes=[[]], cluster="plus1", kernel_hash=sha)[0]

    tf.saved_model.save(Plus1(), str(tmp / "saved"))
    kernel_copy.unlink()
    os.rename(tmp / "saved", tmp / "moved")

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases), str(tmp / "moved")], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:  # a hang: what it printed before still counts
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        proc = subprocess.CompletedProcess(e.cmd, "timeout", out, "timed out after 240 s")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            results.update(json.loads(line))
    return results, proc


def _child_result(child, name):
    results, proc = child
    assert name in results, f"child process exited {proc.returncode} before {name!r}:\n{proc.stderr[-3000:]}"
    return results[name]


def test_import_registers_the_op(child):
    assert _child_result(child, "registered")[0] is True


@pytest.mark.parametrize("name", ["truncated", "header_only", "empty", "garbage", "tail_cut", "directory"]
                         + [f"cut{k}" for k in range(1, 10)])
def test_damaged_kernel_file_is_a_clear_error(child, name):
    kind, message = _child_result(child, name)
    assert kind in ("InvalidArgumentError", "NotFoundError"), (kind, message)
    assert name in message or "child" in message  # names the file
    if name != "directory":
        assert f"cannot load tfxla kernel '" in message and f"{name}.so'" in message


@pytest.mark.parametrize("name, error, message", [
    ("dev_zero", "InvalidArgumentError", "tfxla kernel file '/dev/zero' is not a regular file (it is a character "
                                         "device)"),
    ("fifo", "InvalidArgumentError", "fifo.so' is not a regular file (it is a FIFO)"),
    ("dev_zero_rebuild", "InvalidArgumentError", "tfxla kernel '/dev/zero' cannot be read (tfxla kernel file "
                                                 "'/dev/zero' is not a regular file (it is a character device))"),
    ("fifo_rebuild", "NotFoundError", "fifo.so' is not a regular file (it is a FIFO)), and its source"),
    ("fifo_source", "NotFoundError", "fifo_source.c' is not a regular file (it is a FIFO)"),
    ("zero_source", "NotFoundError", "zero_source.c' is not a regular file (it is a character device)"),
])
def test_dev_zero_and_fifos_are_refused_at_once(child, name, error, message):
    kind, text = _child_result(child, name)
    assert kind == error and message in text, (kind, text)
    if name.endswith("_source"):
        assert "its source cannot be read: tfxla kernel source '" in text


def test_good_kernel_after_damaged_ones_and_saved_model_from_moved_dir(child):
    assert _child_result(child, "good") == ["ok", "2.0"]
    assert _child_result(child, "saved_model") == ["ok", "42.0"]


# --- the loader ------------------------------------------------------------------------------------
def test_build_error_carries_command_and_stderr(tmp_path):
    bad = tmp_path / "bad.cc"
    bad.write_text("this is not C++;\n")
    info = {"tf_version": "x", "compile_flags": [], "link_flags": []}
    with pytest.raises(_op.OpBuildError) as e:
        _op.build(tmp_path / "out.so", info, source=bad)
    assert str(bad) in " ".join(e.value.command) and "error" in e.value.stderr
    assert "command: " in str(e.value) and not (tmp_path / "out.so").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.cc"]  # no temporaries left behind


def test_packaged_library_needs_a_matching_sidecar(tmp_path, monkeypatch):
    monkeypatch.setattr(_op, "HERE", tmp_path)
    info = _op.tf_build_info()
    assert _op.packaged_library(info) is None
    (tmp_path / _op.PACKAGED_SO).write_bytes(b"")
    sidecar = {**info, "source_sha256": _op.source_digest()}
    (tmp_path / _op.SIDECAR).write_text(json.dumps({**sidecar, "tf_version": "2.0.0"}))
    assert _op.packaged_library(info) is None  # built for another TensorFlow
    (tmp_path / _op.SIDECAR).write_text(json.dumps({**sidecar, "source_sha256": "0" * 64}))
    assert _op.packaged_library(info) is None  # built from another source
    (tmp_path / _op.SIDECAR).write_text(json.dumps(sidecar))
    assert _op.packaged_library(info) == tmp_path / _op.PACKAGED_SO


def test_eager_call_overhead(op, kernels):
    """x+1 on a scalar: one eager op call (docs/design.md §3: measured ~0.011 ms for a custom op).

    The path is passed as a ready tensor: converting a Python str to a string tensor costs more
    than the call itself (~0.03 ms here), so callers keep the path tensor.
    """
    _, _, path, sha = kernels["scalar_add_one"]
    x, path_t = tf.constant(1.0), tf.constant(path)
    kw = dict(kernel_path=path_t, args=[x], Tout=[tf.float32], output_shapes=[[]], cluster="c", kernel_hash=sha)
    for _ in range(200):
        op.tfxla_launch(**kw)
    times = []
    for _ in range(2000):
        t0 = time.perf_counter()
        op.tfxla_launch(**kw)
        times.append(time.perf_counter() - t0)
    median_ms = float(np.median(times)) * 1e3
    print(f"TfxlaLaunch eager call, scalar x+1: median {median_ms:.4f} ms")
    assert median_ms < 0.5  # generous: catches a reload or a hash per call, not a slow machine
