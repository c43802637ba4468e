"""GPU benchmarks of the CUDA backend (needs a GPU, PyCUDA, and JAX for the comparisons).

    python -m bench.cuda_bench [--repeats N] [--json PATH] [--only NAME ...]

* ``reduce_bw``: reduce_sum((x*w+b)*mask) over 1e8 f32 elements (one fused split-reduction
  kernel reading 1.6 GB) against the measured device-to-device copy bandwidth
  (``cuMemcpyDtoD`` of 400 MB, counted as read + write). Target: at least 80%.
* ``gelu``, ``softmax``, ``layer_norm`` at [8192, 8192] f32: our kernels (HLO through our
  pipeline) against ``jax.jit`` of the same computation. Target: at least as fast.
* ``matmul_f16``: a [4096, 4096] x [4096, 4096] f16 dot (f32 accumulation), on the tensor cores
  (``dot-wmma``) and on the CUDA cores (``tensor_cores=False``), against ``jax.jit`` (cuBLAS), so
  the choice between our wmma kernel and a library GEMM rests on a number.

Times are medians over ``--repeats`` runs after a warm-up, with inputs already on the device:
ours by CUDA events around the host program (``Executable.run_device``), JAX by the same events
around ``fn(x).block_until_ready()``, both including launch overheads. Results are checked
against JAX (f32 rtol 1e-4 / atol 1e-4) before timing. No TensorFlow is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with PyCUDA

import numpy as np  # noqa: E402

import backends.cuda as cuda  # noqa: E402
import hlo  # noqa: E402
from backends.cuda.pipeline import optimize  # noqa: E402

N_REDUCE = 100_000_000
ROWS = COLS = 8192
GEMM = 4096

_ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
_MAX = "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n"


def reduce_hlo(n: int) -> str:
    return f"""HloModule reduce_bw
{_ADD}
ENTRY main {{
  x = f32[{n}] parameter(0)
  w = f32[{n}] parameter(1)
  b = f32[{n}] parameter(2)
  m = f32[{n}] parameter(3)
  xw = f32[{n}] multiply(x, w)
  xwb = f32[{n}] add(xw, b)
  p = f32[{n}] multiply(xwb, m)
  zero = f32[] constant(0)
  ROOT r = f32[] reduce(p, zero), dimensions={{0}}, to_apply=add
}}
"""


def gelu_hlo(r: int, c: int) -> str:
    s = f"f32[{r},{c}]"
    return f"""HloModule gelu
ENTRY main {{
  x = {s} parameter(0)
  half = f32[] constant(0.5)
  one = f32[] constant(1)
  c = f32[] constant(0.044715)
  k = f32[] constant(0.7978845608)
  h = {s} broadcast(half), dimensions={{}}
  o = {s} broadcast(one), dimensions={{}}
  cb = {s} broadcast(c), dimensions={{}}
  kb = {s} broadcast(k), dimensions={{}}
  x2 = {s} multiply(x, x)
  x3 = {s} multiply(x2, x)
  t1 = {s} multiply(cb, x3)
  t = {s} add(x, t1)
  inner = {s} multiply(kb, t)
  th = {s} tanh(inner)
  sum = {s} add(o, th)
  hx = {s} multiply(h, x)
  ROOT y = {s} multiply(hx, sum)
}}
"""


def softmax_hlo(r: int, c: int) -> str:
    s = f"f32[{r},{c}]"
    return f"""HloModule softmax
{_ADD}
{_MAX}
ENTRY main {{
  x = {s} parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[{r}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = {s} broadcast(m), dimensions={{0}}
  d = {s} subtract(x, mb)
  e = {s} exponential(d)
  sum = f32[{r}] reduce(e, zero), dimensions={{1}}, to_apply=add
  sb = {s} broadcast(sum), dimensions={{0}}
  ROOT y = {s} divide(e, sb)
}}
"""


def layer_norm_hlo(r: int, c: int) -> str:
    s = f"f32[{r},{c}]"
    return f"""HloModule layer_norm
{_ADD}
ENTRY main {{
  x = {s} parameter(0)
  g = f32[{c}] parameter(1)
  b = f32[{c}] parameter(2)
  zero = f32[] constant(0)
  n = f32[] constant({1.0 / c!r})
  eps = f32[] constant(1e-5)
  s1 = f32[{r}] reduce(x, zero), dimensions={{1}}, to_apply=add
  nb = f32[{r}] broadcast(n), dimensions={{}}
  mean = f32[{r}] multiply(s1, nb)
  mb = {s} broadcast(mean), dimensions={{0}}
  cx = {s} subtract(x, mb)
  c2 = {s} multiply(cx, cx)
  v = f32[{r}] reduce(c2, zero), dimensions={{1}}, to_apply=add
  var = f32[{r}] multiply(v, nb)
  eb = f32[{r}] broadcast(eps), dimensions={{}}
  ve = f32[{r}] add(var, eb)
  rs = f32[{r}] rsqrt(ve)
  rb = {s} broadcast(rs), dimensions={{0}}
  y = {s} multiply(cx, rb)
  gb = {s} broadcast(g), dimensions={{1}}
  bb = {s} broadcast(b), dimensions={{1}}
  yg = {s} multiply(y, gb)
  ROOT out = {s} add(yg, bb)
}}
"""


def matmul_hlo(n: int) -> str:
    return f"""HloModule matmul_f16
ENTRY main {{
  a = f16[{n},{n}] parameter(0)
  b = f16[{n},{n}] parameter(1)
  ROOT d = f16[{n},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def jax_fns():
    import jax
    import jax.numpy as jnp

    def gelu(x):
        return 0.5 * x * (1 + jnp.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    def softmax(x):
        e = jnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def layer_norm(x, g, b):
        mean = x.mean(axis=1, keepdims=True)
        c = x - mean
        var = (c * c).mean(axis=1, keepdims=True)
        return c * jax.lax.rsqrt(var + 1e-5) * g + b

    def matmul(a, b):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(jnp.float16)

    return {"gelu": jax.jit(gelu), "softmax": jax.jit(softmax), "layer_norm": jax.jit(layer_norm),
            "matmul_f16": jax.jit(matmul)}


def compile_hlo(text: str, cache_dir: str | None, codegen=None):
    module = optimize(hlo.parse_module(text))
    t = time.perf_counter()
    exe = cuda.compile(module, cuda.CompileOptions(codegen=codegen, cache_dir=cache_dir, prepared=True))
    return exe, time.perf_counter() - t


def time_ours(exe, repeats: int) -> list[float]:
    exe.run_device()
    exe.device.synchronize()
    timer = exe.device.timer()
    out = []
    for _ in range(repeats):
        timer.start()
        exe.run_device()
        out.append(timer.stop())
    return out


def time_jax(fn, args, device, repeats: int) -> list[float]:
    fn(*args).block_until_ready()
    timer = device.timer()
    out = []
    for _ in range(repeats):
        timer.start()
        fn(*args).block_until_ready()
        out.append(timer.stop())
    return out


def bench_reduce(repeats: int, cache_dir, n: int = N_REDUCE) -> dict:
    exe, compile_s = compile_hlo(reduce_hlo(n), cache_dir)
    rng = np.random.default_rng(0)
    args = [rng.random(n, dtype=np.float32) for _ in range(4)]
    got = exe(*args)[0]
    want = np.sum((args[0].astype(np.float64) * args[1] + args[2]) * args[3])
    ok = abs(float(got) - want) <= 1e-4 * abs(want)
    ms = statistics.median(time_ours(exe, repeats))
    dev = exe.device
    nbytes = 4 * n
    src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
    timer = dev.timer()
    copies = []
    dev.dtod(dst, src, nbytes)
    for _ in range(repeats):
        timer.start()
        dev.dtod(dst, src, nbytes)
        copies.append(timer.stop())
    copy_ms = statistics.median(copies)
    reduce_gbs = 4 * nbytes / ms / 1e6
    copy_gbs = 2 * nbytes / copy_ms / 1e6
    return {"name": "reduce_bw", "elements": n, "ok": bool(ok), "got": float(got), "want": float(want),
            "ours_ms": ms, "reduce_GBps": reduce_gbs, "copy_ms": copy_ms, "copy_GBps": copy_gbs,
            "fraction_of_copy_bw": reduce_gbs / copy_gbs, "target": 0.8, "compile_s": compile_s,
            "kernels": exe.generated.strategies}


def bench_vs_jax(name: str, repeats: int, cache_dir, rows: int = ROWS, cols: int = COLS) -> dict:
    import jax

    text = {"gelu": gelu_hlo, "softmax": softmax_hlo, "layer_norm": layer_norm_hlo}[name](rows, cols)
    exe, compile_s = compile_hlo(text, cache_dir)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((rows, cols), dtype=np.float32)]
    if name == "layer_norm":
        args += [rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)]
    got = exe(*args)[0]
    fn = jax_fns()[name]
    jargs = [jax.device_put(a) for a in args]
    want = np.asarray(fn(*jargs))
    err = float(np.max(np.abs(got - want) / (1e-4 + 1e-4 * np.abs(want))))
    ours = statistics.median(time_ours(exe, repeats))
    theirs = statistics.median(time_jax(fn, jargs, exe.device, repeats))
    return {"name": name, "shape": [rows, cols], "ok": err <= 1.0, "max_error_in_tolerances": err,
            "ours_ms": ours, "jax_ms": theirs, "speedup_vs_jax": theirs / ours, "target": 1.0,
            "compile_s": compile_s, "kernels": exe.generated.strategies}


def bench_matmul(repeats: int, cache_dir, n: int = GEMM) -> dict:
    import jax

    from backends.cuda.codegen import CodegenOptions

    rng = np.random.default_rng(2)
    args = [rng.standard_normal((n, n), dtype=np.float32).astype(np.float16) for _ in range(2)]
    fn = jax_fns()["matmul_f16"]
    jargs = [jax.device_put(a) for a in args]
    want = np.asarray(fn(*jargs)).astype(np.float32)
    result = {"name": "matmul_f16", "shape": [n, n, n], "ok": True, "target": 1.0, "kernels": {}}
    for label, tensor_cores in (("ours", True), ("cuda_cores", False)):
        exe, compile_s = compile_hlo(matmul_hlo(n), cache_dir, CodegenOptions(tensor_cores=tensor_cores))
        got = exe(*args)[0].astype(np.float32)
        err = float(np.max(np.abs(got - want) / (1e-1 + 1e-2 * np.abs(want))))  # f16 results of K=4096 sums
        result["ok"] = result["ok"] and err <= 1.0
        result[f"{label}_ms"] = statistics.median(time_ours(exe, repeats))
        result[f"{label}_max_error_in_tolerances"] = err
        result[f"{label}_compile_s"] = compile_s
        result["kernels"].update(exe.generated.strategies)
        device = exe.device
    result["jax_ms"] = statistics.median(time_jax(fn, jargs, device, repeats))
    result["speedup_vs_jax"] = result["jax_ms"] / result["ours_ms"]
    result["tflops_ours"] = 2 * n ** 3 / result["ours_ms"] / 1e9
    result["tflops_jax"] = 2 * n ** 3 / result["jax_ms"] / 1e9
    return result


def run(names=None, repeats: int = 20, cache_dir=None, log=print) -> list[dict]:
    results = []
    jobs = [("reduce_bw", lambda: bench_reduce(repeats, cache_dir))] + [
        (n, lambda n=n: bench_vs_jax(n, repeats, cache_dir)) for n in ("gelu", "softmax", "layer_norm")] + [
        ("matmul_f16", lambda: bench_matmul(repeats, cache_dir))]
    for name, job in jobs:
        if names and name not in names:
            continue
        try:
            r = job()
        except Exception as e:  # noqa: BLE001 (reported, the other benchmarks still run)
            r = {"name": name, "error": f"{type(e).__name__}: {e}"}
        log(json.dumps(r))
        results.append(r)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    results = run(args.only, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
