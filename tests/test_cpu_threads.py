"""CPU kernels on the caller's threads (kernel ABI 2): results that do not depend on the thread count,
the Python runtime's pool, and many Python threads calling kernels at once.

(a) One module of loop nests and reductions, compiled with a low ``parallel_threshold`` so that small
    inputs take the parallel paths: elementwise nests (a leading size-1 dim, a collapsed pair of loops
    whose tasks are decoded, a 1-D one), and full and row reductions of every reducer kind with a vector
    clause (``SIMD_REDUCTIONS``: +, * and max/min of floats with NaN, of ints with their limits, and/or of
    pred), a reduction reading a local computed before it (passed to the shard by value). Outputs with
    ``num_threads`` 1, 2, 3 and 8 are bitwise identical (the reduction parts are fixed at code generation)
    and match ``hlo.evaluate``: exact for integers, pred, max/min and NaN positions; sums at rtol 1e-5
    (f32; reassociated by the parts and the vectorizer) and 1e-12 (f64); the f32 product of 40000
    values at 1e-4 (each product rounds: a random walk of 40000 half-ulp errors is ~1.2e-5). The same for a
    guarded oneDNN convolution, whose max |x| check runs in parts (rtol 1e-4 against the evaluator, as
    tests/test_cpu_dnnl_epilogue.py says why).
(b) The pool's ``parallel_for`` runs [0, n) exactly once in at most num_threads contiguous, non-empty
    blocks, and takes no CPU while idle.
(d) Several Python threads, each with its own ``Kernel`` (a Kernel's scratch is its own), call the module
    at once, so calls find the pool busy and run serially: every result is the single-thread one.
"""

from __future__ import annotations

import ctypes
import resource
import threading
import time

import numpy as np
import pytest

import hlo
from backends.cpu import CodegenOptions, CompileOptions, compile as compile_module, dnnl
from backends.cpu.runtime import Kernel
from backends.cpu.thread_pool import runtime
from tests.cpu_backend_util import kernel_cache  # noqa: F401  (a fixture)

THREADS = (1, 2, 3, 8)
N = 40000  # a full reduction of N elements is cut into 16 parts

# name -> (element type, reducer op, input dims, reduced dims, how the input is made)
REDUCTIONS = {
    "sum_f32": ("f32", "add", (N,), (0,), "normal"),
    "sum_rows_f32": ("f32", "add", (1, 3, N // 2), (1, 2), "normal"),  # 3 rows: each row's loop in ranges
    "sum_f32_64x1024": ("f32", "add", (64, 1024), (0, 1), "normal"),  # 16 ranges of rows
    "sum_nan_f32": ("f32", "add", (N,), (0,), "nan"),
    "prod_f32": ("f32", "multiply", (N,), (0,), "near_one"),
    "max_f32": ("f32", "maximum", (N,), (0,), "normal"),
    "max_nan_f32": ("f32", "maximum", (N,), (0,), "nan"),
    "min_nan_f32": ("f32", "minimum", (1, 3, N // 2), (1, 2), "nan"),
    "sum_f64": ("f64", "add", (N,), (0,), "normal"),
    "max_nan_f64": ("f64", "maximum", (N,), (0,), "nan"),
    "min_f64": ("f64", "minimum", (N,), (0,), "normal"),
    "sum_s32": ("s32", "add", (N,), (0,), "ints"),
    "prod_s32": ("s32", "multiply", (N,), (0,), "signs"),
    "max_s32": ("s32", "maximum", (N,), (0,), "ints"),
    "min_s64": ("s64", "minimum", (1, 3, N // 2), (1, 2), "ints"),
    "max_u32": ("u32", "maximum", (N,), (0,), "ints"),
    "min_u32": ("u32", "minimum", (N,), (0,), "ints"),
    "and_pred": ("pred", "and", (N,), (0,), "all_but_last"),
    "or_pred": ("pred", "or", (N,), (0,), "none_but_last"),
}
ELEMENTWISE = {"leading_one": (1, 8, 9, 128), "collapsed": (37, 5, 3), "one_dim": (5000,)}
INITS = {"add": 0, "multiply": 1, "maximum": "-inf", "minimum": "inf", "and": "true", "or": "false"}
INT_INITS = {("s32", "maximum"): -2147483648, ("s64", "minimum"): 9223372036854775807,
             ("u32", "maximum"): 0, ("u32", "minimum"): 4294967295}


def _dims(dims) -> str:
    return ",".join(map(str, dims))


def _module() -> str:
    comps, params, calls = [], [], []
    for k, (name, (t, op, dims, reduced, _)) in enumerate(REDUCTIONS.items()):
        init = INT_INITS.get((t, op), INITS[op])
        out = [d for i, d in enumerate(dims) if i not in reduced]
        comps.append(f"""%red_{name} (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
  ROOT %c = {t}[] {op}(%a, %b)
}}
%f_{name} (x: {t}[{_dims(dims)}]) -> {t}[{_dims(out)}] {{
  %x = {t}[{_dims(dims)}] parameter(0)
  %z = {t}[] constant({init})
  ROOT %r = {t}[{_dims(out)}] reduce(%x, %z), dimensions={{{_dims(reduced)}}}, to_apply=%red_{name}
}}""")
        params.append(f"{t}[{_dims(dims)}]")
        calls.append((f"{t}[{_dims(out)}]", f"kind=kLoop, calls=%f_{name}", [k]))
    # A sum scaled by s whose initial value is s: the loop reads s loaded before it (passed by value).
    k = len(params)
    comps.append(f"""%scaled (x: f32[{N}], s: f32[]) -> f32[] {{
  %x = f32[{N}] parameter(0)
  %s = f32[] parameter(1)
  %bs = f32[{N}] broadcast(%s), dimensions={{}}
  %m = f32[{N}] multiply(%x, %bs)
  ROOT %r = f32[] reduce(%m, %s), dimensions={{0}}, to_apply=%red_sum_f32
}}""")
    params += [f"f32[{N}]", "f32[]"]
    calls.append(("f32[]", "kind=kLoop, calls=%scaled", [k, k + 1]))
    for name, dims in ELEMENTWISE.items():
        k = len(params)
        comps.append(f"""%e_{name} (x: f32[{_dims(dims)}], y: f32[{_dims(dims)}]) -> f32[{_dims(dims)}] {{
  %x = f32[{_dims(dims)}] parameter(0)
  %y = f32[{_dims(dims)}] parameter(1)
  %t = f32[{_dims(dims)}] tanh(%x)
  ROOT %m = f32[{_dims(dims)}] multiply(%t, %y)
}}""")
        params += [f"f32[{_dims(dims)}]"] * 2
        calls.append((f"f32[{_dims(dims)}]", f"kind=kLoop, calls=%e_{name}", [k, k + 1]))
    lines = [f"  %p{k} = {shape} parameter({k})" for k, shape in enumerate(params)]
    lines += [f"  %o{j} = {shape} fusion({', '.join(f'%p{k}' for k in ks)}), {attrs}"
              for j, (shape, attrs, ks) in enumerate(calls)]
    lines.append(f"  ROOT %t = ({', '.join(shape for shape, _, _ in calls)}) tuple({', '.join(f'%o{j}' for j in range(len(calls)))})")
    return "HloModule threads\n\n" + "\n\n".join(comps) + "\n\nENTRY %main {\n" + "\n".join(lines) + "\n}\n"


def _input(t: str, dims, how: str, rng) -> np.ndarray:
    np_t = {"f32": np.float32, "f64": np.float64, "s32": np.int32, "s64": np.int64, "u32": np.uint32,
            "pred": np.bool_}[t]
    if how in ("normal", "nan"):
        x = rng.standard_normal(dims).astype(np_t)
        if how == "nan":
            x.reshape(-1)[int(rng.integers(x.size))] = np.nan
        return x
    if how == "near_one":
        return (1 + rng.standard_normal(dims) * 1e-3).astype(np_t)
    if how == "signs":
        return rng.choice(np.array([-1, 1], np_t), dims)
    if how == "ints":
        info = np.iinfo(np_t)
        return rng.integers(max(info.min, -10**6), min(info.max, 10**6), dims, dtype=np_t, endpoint=True)
    x = np.full(dims, how == "all_but_last", np.bool_)
    x.reshape(-1)[-1] = not x.reshape(-1)[-1]
    return x


@pytest.fixture(scope="module")
def threads_case(kernel_cache):  # noqa: F811
    module = hlo.parse_module(_module())
    exe = compile_module(module, CompileOptions(codegen=CodegenOptions(parallel_threshold=512), cache_dir=str(kernel_cache)))
    rng = np.random.default_rng(0)
    args = [_input(t, dims, how, rng) for t, _, dims, _, how in REDUCTIONS.values()]
    args += [rng.standard_normal(N).astype(np.float32), np.float32(0.75)]
    for dims in ELEMENTWISE.values():
        args += [rng.standard_normal(dims).astype(np.float32) for _ in range(2)]
    return exe, args


def _names() -> list[str]:
    return [*REDUCTIONS, "scaled", *ELEMENTWISE]


def test_the_loops_run_as_shards(threads_case) -> None:
    exe, _ = threads_case
    src = exe.source
    assert "#pragma omp parallel" not in src and "omp_get" not in src
    assert src.count("tfxla_parallel(16, comp_0_par") >= 10  # full reductions in 16 parts
    assert "tfxla_parallel(15, comp_0_par" in src  # 3 rows x 5 ranges
    assert "tfxla_parallel(72, comp_0_par" in src and "tfxla_parallel(185, comp_0_par" in src  # 8x9, 37x5 tasks
    scaled = src[src.index("/* %o19 = "):src.index("/* %o20 = ")]
    shard = scaled.split("tfxla_parallel(16, ")[1].split(",")[0]
    ctx = src[src.index("typedef struct", src.index(f"}} {shard}_ctx;") - 400):src.index(f"}} {shard}_ctx;")]
    assert "float x" in ctx  # the loaded s, passed by value


def test_results_do_not_depend_on_the_thread_count(threads_case) -> None:
    exe, args = threads_case
    outs = {t: Kernel(exe.path, exe.sha256, num_threads=t).run(*args) for t in THREADS}
    for name, got1, *others in zip(_names(), *outs.values()):
        for t, got in zip(THREADS[1:], others):
            assert got.tobytes() == got1.tobytes(), f"{name}: {t} threads differ from 1"
    want = hlo.evaluate(exe.module, *args)
    for name, got, w in zip(_names(), outs[1], want):
        w = np.asarray(w)
        kind = REDUCTIONS.get(name, ("f32", "multiply", 0, 0, ""))
        if got.dtype.kind in "biu" or kind[1] in ("maximum", "minimum"):
            np.testing.assert_array_equal(got, w, err_msg=name)
        else:
            rtol = 1e-12 if got.dtype == np.float64 else 1e-4 if name == "prod_f32" else 1e-5
            np.testing.assert_allclose(got, w, rtol=rtol, atol=1e-6, equal_nan=True, err_msg=name)
    assert np.isnan(outs[1][_names().index("sum_nan_f32")]) and np.isnan(outs[1][_names().index("min_nan_f32")]).all()


@pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")
def test_a_guarded_onednn_convolution_checks_in_parts(kernel_cache) -> None:  # noqa: F811
    from tests.test_cpu_dnnl import args_for
    from tests.test_cpu_dnnl_epilogue import NAN_TAILS, _for_hero, output_fusion

    module = hlo.parse_module(output_fusion(_for_hero(NAN_TAILS["relu_tf_select"][0], "conv"), "conv"))
    exe = compile_module(module, CompileOptions(codegen=CodegenOptions(parallel_threshold=64), cache_dir=str(kernel_cache)))
    assert "tfxla_absmax_f32((const void*)(b2), 320, 1)" in exe.source  # the activations, in parts
    for nan in (False, True):
        args = args_for(exe.module, seed=3)
        if nan:
            args[0][0, 2, 3, 1] = np.nan  # the check says so: the NaN-keeping path
        outs = [Kernel(exe.path, exe.sha256, num_threads=t).run(*args)[0] for t in THREADS]
        assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:])
        want = np.asarray(hlo.evaluate(exe.module, *args)[0])
        np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4, equal_nan=True)
        assert np.isnan(outs[0]).any() == nan


TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, TASK, ctypes.c_void_p)


@pytest.mark.parametrize("threads,n", [(3, 1000), (3, 2), (8, 5), (2, 1)])
def test_the_pool_runs_each_task_once_in_contiguous_blocks(threads: int, n: int) -> None:
    rt = runtime(threads)
    assert rt.num_threads == threads and rt.struct_size == 32
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def task(_ctx, begin: int, end: int) -> None:
        with lock:
            calls.append((begin, end))

    PARALLEL_FOR(rt.parallel_for)(rt.pool, n, TASK(task), None)
    calls.sort()
    assert calls[0][0] == 0 and calls[-1][1] == n and len(calls) == min(threads, n)  # the pool was idle
    assert all(b < e for b, e in calls) and all(a[1] == b[0] for a, b in zip(calls, calls[1:]))


def test_one_thread_is_serial_and_fewer_is_refused() -> None:
    assert runtime(1) is None  # tfxla_run gets rt = NULL
    with pytest.raises(ValueError, match="num_threads must be at least 1, got 0"):
        runtime(0)


def test_an_idle_pool_takes_no_cpu(threads_case) -> None:
    exe, args = threads_case
    Kernel(exe.path, exe.sha256, num_threads=3).run(*args)  # the pool's workers have just worked
    time.sleep(0.05)  # past their spin
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.3)
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert used < 0.05, f"{used:.3f} s of CPU in 0.3 s idle: the workers spin"


def test_many_python_threads_call_kernels_at_once(threads_case) -> None:
    exe, args = threads_case
    want = [o.tobytes() for o in Kernel(exe.path, exe.sha256, num_threads=1).run(*args)]
    failures: list[str] = []
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        kernel = Kernel(exe.path, exe.sha256, num_threads=(2, 3)[k % 2])
        barrier.wait()
        for _ in range(8):
            got = [o.tobytes() for o in kernel.run(*args)]
            if got != want:
                failures.append(f"thread {k}: outputs {[i for i, (g, w) in enumerate(zip(got, want)) if g != w]}")
                return

    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures
