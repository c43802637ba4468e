"""Benchmark ``tfxla_plugin.function`` against ``tf.function`` and ``tf.function(jit_compile=True)``.

    python -m bench.function_bench [--filter TEXT] [--seconds S] [--rounds R] [--cache_dir DIR] [--json FILE]

The rows of docs/design.md §9 (``bench/models.py``), each in this one process: TF graph (``tf.function``),
TF XLA (``tf.function(jit_compile=True)``) and ours (``tfxla_plugin.function(jit_compile=True)``) on
the same inputs and live variables. Per row it prints median milliseconds per call (engines measured
in interleaved rounds, so a change in machine load hits all three alike), the ratio of the faster TF
mode's time to ours (> 1: we are faster), our compile time cold (empty kernel cache: ``--cache_dir``
given through ``TFXLA_FLAGS``, a fresh temporary directory unless ``--cache_dir`` names one) and warm
(a new ``tfxla_plugin.function`` object: retrace, cluster, lower, optimize, generate, cache hit), TF
XLA's first-call time (trace + compile), the number of clusters and of kernels (the entry
computation's loop nests and library calls after fusion; how many of them are oneDNN primitives in
parentheses), the call path (``eager``: one launch called as an eager op; ``graph``: the rewritten
graph), and the result check against TF graph mode (a training step is checked on its loss and every
variable it writes after one step from the same initial values).

This is a benchmark, not a test: a failing row is reported with its error and the run goes on.
OpenVINO and ONNX Runtime columns are left out unless those packages are installed (they are not
used yet even then: docs/design.md §9 has their numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfxla_plugin  # noqa: E402
from bench.models import ROWS, Case, Row  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402

NOT_KERNELS = {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST}


def set_cache_dir(cache_dir: str) -> None:
    """Point our kernel cache at ``cache_dir`` through TFXLA_FLAGS, keeping any other flags set there."""
    kept = [t for t in os.environ.get("TFXLA_FLAGS", "").split() if not t.startswith("--cache_dir=")]
    os.environ["TFXLA_FLAGS"] = " ".join(kept + [f"--cache_dir={cache_dir}"])


def timed(fn) -> float:
    start = time.perf_counter()
    out = fn()
    for t in tf.nest.flatten(out):
        if hasattr(t, "numpy"):
            t.numpy()  # make sure the work is done
    return time.perf_counter() - start


def interleaved_medians(engines: dict, seconds: float, rounds: int) -> dict[str, float]:
    """Median ms per call of each engine, measured in ``rounds`` interleaved rounds of ~seconds/rounds."""
    per_call = {}
    for name, fn in engines.items():  # warm up, and estimate the cost of one call
        fn()
        per_call[name] = min(timed(fn) for _ in range(2))
    samples: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, fn in engines.items():
            n = max(1, min(2000, int(seconds / rounds / max(per_call[name], 1e-6))))
            for _ in range(n):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(s) for name, s in samples.items()}


def sync(fn, args):
    """A no-argument call of ``fn``: CPU ops (eager and ``tf.function``) return when their work is done."""
    return lambda: fn(*args)


def results(case: Case, fn) -> list[np.ndarray]:
    """One call from the initial state: its outputs, then (training) the values of the state variables."""
    if case.reset is not None:
        case.reset()
    outs = [np.asarray(t) for t in tf.nest.flatten(fn(*case.args))]
    return outs + [np.asarray(v.numpy()) for v in case.state]


def check(case: Case, got: list, want: list) -> tuple[str, float]:
    """('ok' or what differs, worst |got - want| relative to the tolerance)."""
    if len(got) != len(want):
        return f"{len(got)} results, TF gave {len(want)}", float("inf")
    worst = 0.0
    for k, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"result {k}: {g.dtype}{g.shape} vs TF {w.dtype}{w.shape}", float("inf")
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return f"result {k} differs", float("inf")
            continue
        atol = case.atol * (max(1.0, float(np.max(np.abs(w)))) if case.scaled and w.size else 1.0)
        err = np.abs(g.astype(np.float64) - w) / (atol + case.rtol * np.abs(w))
        worst = max(worst, float(np.max(err)) if err.size else 0.0)
        if not np.all(np.isfinite(g) == np.isfinite(w)) or worst > 1.0:
            return f"result {k}: max |diff| {float(np.max(np.abs(g - w))):.3g} over tolerance", worst
    return "ok", worst


def kernel_counts(compiled) -> tuple[int, int]:
    kernels = dnnl = 0
    for c in compiled.clusters:
        kernels += sum(1 for i in c.optimized.entry.instructions if i.opcode not in NOT_KERNELS)
        dnnl += c.c_source.count("dnnl_primitive_execute(")
    return kernels, dnnl


def prepare_row(row: Row) -> tuple[dict, dict, Case]:
    """Build ``row``'s case, its engines (no-argument calls by name: tf_graph, tf_xla, ours where they
    compile) and the row's record so far: our compile times, counts, call path and result check."""
    out: dict = {"workload": row.name, "load_before": os.getloadavg()[0]}
    case = row.build()
    graph = tf.function(case.fn)
    xla = tf.function(case.fn, jit_compile=True)
    want = results(case, graph)

    ours = tfxla_plugin.function(case.fn, jit_compile=True)
    try:
        start = time.perf_counter()
        compiled = ours.compiled_graph(*case.args)  # trace, cluster, lower, optimize, generate, cc
        out["compile_cold_s"] = time.perf_counter() - start
        out["cache_hit_cold"] = all(c.cache_hit for c in compiled.clusters)
        start = time.perf_counter()
        got = results(case, ours)  # the first call also loads the kernel and builds oneDNN primitives
        out["first_call_s"] = time.perf_counter() - start
        out["check"], out["error_vs_tol"] = check(case, got, want)
        again = tfxla_plugin.function(case.fn, jit_compile=True)
        start = time.perf_counter()
        warm = again.compiled_graph(*case.args)
        out["compile_warm_s"] = time.perf_counter() - start
        out["cache_hit_warm"] = all(c.cache_hit for c in warm.clusters)
        out["clusters"] = len(compiled.clusters)
        out["kernels"], out["dnnl"] = kernel_counts(compiled)
        out["path"] = "eager" if compiled._fast is not None else "graph"
    except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
        out["check"] = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        out["traceback"] = traceback.format_exc()
        ours = None

    engines = {"tf_graph": sync(graph, case.args)}
    try:
        start = time.perf_counter()
        sync(xla, case.args)()
        out["xla_compile_s"] = time.perf_counter() - start
        engines["tf_xla"] = sync(xla, case.args)
    except Exception as e:  # noqa: BLE001
        out["xla_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if ours is not None:
        engines["ours"] = sync(ours, case.args)
    return out, engines, case


def measure(row: Row, case: Case, engines: dict, seconds: float, rounds: int) -> dict[str, float]:
    """Median ms per call of each engine from the case's initial state (a heavy row gets half the time)."""
    if case.reset is not None:
        case.reset()
    scale = 0.5 if row.heavy else 1.0
    return interleaved_medians(engines, seconds * scale, rounds)


def run_row(row: Row, seconds: float, rounds: int) -> dict:
    out, engines, case = prepare_row(row)
    out.update(measure(row, case, engines, seconds, rounds))
    out["load_after"] = os.getloadavg()[0]
    return out


HEADER = (f"{'workload':30s} {'TF graph':>9s} {'TF XLA':>9s} {'ours':>9s} {'best/ours':>9s} {'vs graph':>8s} "
          f"{'vs XLA':>7s} {'cold s':>7s} {'warm s':>7s} {'XLA s':>6s} {'clus':>4s} {'kernels':>11s} "
          f"{'path':>5s}  check")


def _ms(x) -> str:
    return f"{x:9.3f}" if isinstance(x, float) else f"{'-':>9s}"


def format_row(r: dict) -> str:
    g, x, o = r.get("tf_graph"), r.get("tf_xla"), r.get("ours")
    best = min(v for v in (g, x) if v is not None)
    ratio = lambda a: f"{a / o:7.2f}x" if a is not None and o else f"{'-':>8s}"  # noqa: E731
    s = lambda k, f: format(r[k], f) if k in r else "-"  # noqa: E731
    kernels = f"{r['kernels']} ({r['dnnl']})" if "kernels" in r else "-"
    return (f"{r['workload']:30s} {_ms(g)} {_ms(x)} {_ms(o)} {ratio(best):>9s} {ratio(g):>8s} {ratio(x):>7s} "
            f"{s('compile_cold_s', '7.2f'):>7s} {s('compile_warm_s', '7.2f'):>7s} {s('xla_compile_s', '6.2f'):>6s} "
            f"{r.get('clusters', '-'):>4} {kernels:>11s} {r.get('path', '-'):>5s}  {r['check']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--filter", default=None, help="only rows whose name contains this text")
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per engine per row")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved measuring rounds")
    parser.add_argument("--cache_dir", default=None, help="kernel cache (default: a fresh empty directory)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tfxla_bench_cache_") as fresh:
        set_cache_dir(args.cache_dir or fresh)
        extras = [m for m in ("openvino", "onnxruntime") if _installed(m)]
        print(f"tfxla_plugin.function vs TF {tf.__version__} on {os.cpu_count()} CPUs; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; kernel cache {args.cache_dir or fresh}"
              f"{'; not measured here: ' + ', '.join(extras) if extras else ''}")
        print("median ms per call; best/ours = faster TF mode / ours (> 1: we are faster); "
              "cold/warm: our compile s; XLA s: XLA's first call; kernels (oneDNN primitives)")
        print(HEADER, flush=True)
        rows = []
        for row in ROWS:
            if args.filter and args.filter not in row.name:
                continue
            try:
                r = run_row(row, args.seconds, args.rounds)
            except Exception as e:  # noqa: BLE001
                r = {"workload": row.name, "check": f"FAILED (TF): {type(e).__name__}: {e}"}
            rows.append(r)
            print(format_row(r), flush=True)
        for r in rows:
            if "traceback" in r:
                print(f"\n--- {r['workload']}: {r['check']}\n{r['traceback'][-3000:]}")
            if "xla_error" in r:
                print(f"\n--- {r['workload']}: TF XLA failed: {r['xla_error']}")
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump([{k: v for k, v in r.items() if k != "traceback"} for r in rows], fh, indent=1)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
