"""Benchmark ``tfxla_plugin.function`` against ``tf.function``, ``tf.function(jit_compile=True)`` and,
when installed, the inference engines OpenVINO and ONNX Runtime.

    python -m bench.function_bench [--filter TEXT] [--seconds S] [--rounds R] [--cache_dir DIR] [--json FILE]
                                   [--no_new_process]

The rows of docs/design.md §9 (``bench/models.py``): TF graph (``tf.function``), TF XLA
(``tf.function(jit_compile=True)``) and ours (``tfxla_plugin.function(jit_compile=True)``) in this process
on the same inputs and live variables, and the engines of ``bench/engines.py`` that are installed
(``pip install -e .[bench]``; inference rows only: a training step gets "-" and a footnote) each in a
process of its own that builds the same seeded row (``bench/engine_process.py``: this process never
loads an engine, and an engine's process is stopped while the others are timed, so no engine thread
runs, spinning or not, while TF or ours is timed). The first table gives per row the median
milliseconds per call (all engines measured in interleaved rounds, so a change in machine load hits
them alike; each round starts with one untimed call), the ratio of the faster TF mode's time to ours
(> 1: we are faster), ours / the best engine (> 1: we are slower), the number of clusters and of
kernels (the entry computation's loop nests and library calls after fusion; how many of them are oneDNN primitives in
parentheses), the call path (``eager``: one launch called as an eager op; ``graph``: the rewritten
graph), and each engine's result checked against TF graph mode with its largest absolute error and that
error relative to the largest |TF result| (a training step is checked on its loss and every variable it
writes after one step from the same initial values).

The second table is compile time, seconds: ours cold (trace, cluster, lower, optimize, generate, C
compile with an empty kernel cache, then the first call: ``--cache_dir`` given through ``TFXLA_FLAGS``,
a fresh temporary directory unless ``--cache_dir`` names one), ours warm in the same process (a new
``tfxla_plugin.function`` object: retrace ... generate, then a cache hit; no call), ours warm in a new
process (``--no_new_process`` leaves it out: a fresh Python with the same disk cache builds the row and
times compile + first call, as a second run of a program would), TF XLA's first call (trace + compile +
run), and each engine's conversion + compilation + first call.

This is a benchmark, not a test: a failing row is reported with its error and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfxla_plugin  # noqa: E402
from bench.engine_process import EngineUnavailable, RemoteEngine, Sampler  # noqa: E402
from bench.engines import ENGINES, Engine, available, skip_reason  # noqa: E402
from bench.models import ROWS, Case, Row, build_case  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402

NAME = max([30] + [len(r.name) for r in ROWS])  # the workload column's width
NOT_KERNELS = {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST}


def set_cache_dir(cache_dir: str) -> None:
    """Point our kernel cache at ``cache_dir`` through TFXLA_FLAGS, keeping any other flags set there."""
    kept = [t for t in os.environ.get("TFXLA_FLAGS", "").split() if not t.startswith("--cache_dir=")]
    os.environ["TFXLA_FLAGS"] = " ".join(kept + [f"--cache_dir={cache_dir}"])


def interleaved_medians(samplers: dict, seconds: float, rounds: int) -> dict[str, float]:
    """Median ms per call of each engine (a ``Sampler`` here or a ``RemoteEngine``), measured in ``rounds``
    interleaved rounds of ~seconds/rounds each."""
    per_call = {name: s.calibrate() for name, s in samplers.items()}  # warm up, and the cost of one call
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(rounds):
        for name, sampler in samplers.items():
            samples[name] += sampler.sample(max(1, min(2000, int(seconds / rounds / max(per_call[name], 1e-6)))))
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


def max_errors(got: list, want: list) -> tuple[float, float]:
    """(largest |got - want| over the float results, that over the largest |want| of its result)."""
    worst_abs = worst_rel = 0.0
    for g, w in zip(got, want):
        if w.dtype.kind != "f" or g.shape != w.shape or not w.size:
            continue
        diff = float(np.max(np.abs(g.astype(np.float64) - w)))
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(float(np.max(np.abs(w))), np.finfo(np.float32).tiny))
    return worst_abs, worst_rel


def record_check(out: dict, prefix: str, case: Case, got: list, want: list) -> None:
    """Store ``got``'s check against TF: ``<prefix>check`` (the text), ``<prefix>error_vs_tol``,
    ``<prefix>max_abs`` and ``<prefix>max_rel`` (ours: no prefix; an engine: its name and "_")."""
    out[f"{prefix}check"], out[f"{prefix}error_vs_tol"] = check(case, got, want)
    out[f"{prefix}max_abs"], out[f"{prefix}max_rel"] = max_errors(got, want)


def kernel_counts(compiled) -> tuple[int, int]:
    kernels = dnnl = 0
    for c in compiled.clusters:
        kernels += sum(1 for i in c.optimized.entry.instructions if i.opcode not in NOT_KERNELS)
        dnnl += c.c_source.count("dnnl_primitive_execute(")
    return kernels, dnnl


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def prepare_row(row: Row, engines: tuple[Engine, ...] = (), directory: str | None = None
                ) -> tuple[dict, dict, Case]:
    """Build ``row``'s case, its samplers by name (tf_graph, tf_xla, ``engines``' names: ``RemoteEngine``s
    started with files in ``directory``, ours; where they compile) and the row's record so far: compile
    times, counts, call path and result checks. The caller closes the ``RemoteEngine``s."""
    out: dict = {"workload": row.name, "load_before": os.getloadavg()[0]}
    case = build_case(row)
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
        record_check(out, "", case, got, want)
        again = tfxla_plugin.function(case.fn, jit_compile=True)
        start = time.perf_counter()
        warm = again.compiled_graph(*case.args)
        out["compile_warm_s"] = time.perf_counter() - start
        out["cache_hit_warm"] = all(c.cache_hit for c in warm.clusters)
        out["clusters"] = len(compiled.clusters)
        out["kernels"], out["dnnl"] = kernel_counts(compiled)
        out["path"] = "eager" if compiled._fast is not None else "graph"
    except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
        out["check"] = f"FAILED: {first_line(e)}"
        out["traceback"] = traceback.format_exc()
        ours = None

    samplers: dict = {"tf_graph": Sampler(sync(graph, case.args))}
    try:
        start = time.perf_counter()
        sync(xla, case.args)()
        out["xla_compile_s"] = time.perf_counter() - start
        samplers["tf_xla"] = Sampler(sync(xla, case.args))
    except Exception as e:  # noqa: BLE001
        out["xla_error"] = first_line(e)
    files = directory or (tempfile.mkdtemp(prefix="tfxla_bench_engines_") if engines else "")
    for engine in engines:
        add_engine(out, samplers, engine.name, lambda e=engine: RemoteEngine(e.name, row.name, files),
                   case, want)
    if ours is not None:
        samplers["ours"] = Sampler(sync(ours, case.args))
    return out, samplers, case


def add_engine(out: dict, samplers: dict, name: str, start, case: Case, want: list) -> None:
    """Start engine ``name`` (``start()``: a ``RemoteEngine``, converted and compiled), check its result
    against TF's and add it to ``samplers``; a row it cannot run (a training step, a conversion that
    fails: ``EngineUnavailable``) is recorded under ``<name>_skip``."""
    reason = skip_reason(case)
    if reason is not None:
        out[f"{name}_skip"] = reason
        return
    try:
        remote = start()
    except EngineUnavailable as e:
        out[f"{name}_skip"] = str(e)
        return
    out[f"{name}_compile_s"] = remote.compile_s
    record_check(out, f"{name}_", case, remote.outputs, want)
    samplers[name] = remote


def measure(row: Row, case: Case, samplers: dict, seconds: float, rounds: int) -> dict[str, float]:
    """Median ms per call of each engine from the case's initial state (a heavy row gets half the time)."""
    if case.reset is not None:
        case.reset()
    scale = 0.5 if row.heavy else 1.0
    return interleaved_medians(samplers, seconds * scale, rounds)


def warm_in_new_process(row: Row) -> dict:
    """Our compile + first call of ``row`` in a new Python process on the kernel cache of TFXLA_FLAGS
    (``warm_child`` there): ``compile_new_process_s``, ``cache_hit_new_process`` or ``new_process_error``."""
    proc = subprocess.run([sys.executable, "-m", "bench.function_bench", "--warm_child", row.name],
                          capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"new_process_error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"}
    return json.loads(lines[-1])


def warm_child(name: str) -> None:
    """The new process of ``warm_in_new_process``: build the row, time our compile + first call, print JSON."""
    case = build_case(next(r for r in ROWS if r.name == name))
    ours = tfxla_plugin.function(case.fn, jit_compile=True)
    start = time.perf_counter()
    compiled = ours.compiled_graph(*case.args)
    results(case, ours)  # the first call, as in the cold time
    print(json.dumps({"compile_new_process_s": time.perf_counter() - start,
                      "cache_hit_new_process": all(c.cache_hit for c in compiled.clusters)}), flush=True)


def run_row(row: Row, seconds: float, rounds: int, engines: tuple[Engine, ...] = (),
            new_process: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="tfxla_bench_engines_") as directory:
        out, samplers, case = prepare_row(row, engines, directory)
        try:
            out.update(measure(row, case, samplers, seconds, rounds))
        finally:  # end the engines' processes before the new process starts
            for sampler in samplers.values():
                if isinstance(sampler, RemoteEngine):
                    sampler.close()
    out["load_after"] = os.getloadavg()[0]
    del samplers, case
    if new_process and "compile_cold_s" in out:
        out.update(warm_in_new_process(row))
    return out


# --- the tables -----------------------------------------------------------------------------------

def _ms(x) -> str:
    return f"{x:9.3f}" if isinstance(x, float) else f"{'-':>9s}"


def _s(x, width: int = 7) -> str:
    return f"{x:{width}.2f}" if isinstance(x, float) else f"{'-':>{width}s}"


def _x(x, width: int = 8) -> str:
    return f"{x:{width - 1}.2f}x" if isinstance(x, float) else f"{'-':>{width}s}"


def _div(a, b) -> float | None:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else None


def header(engines: tuple[Engine, ...]) -> str:
    cols = "".join(f" {e.title:>9s}" for e in engines)
    return (f"{'workload':{NAME}s} {'TF graph':>9s} {'TF XLA':>9s}{cols} {'ours':>9s} {'best/ours':>9s} "
            f"{'vs graph':>8s} {'vs XLA':>7s}{' ours/eng' if engines else ''} {'clus':>4s} {'kernels':>11s} "
            f"{'path':>5s}  check: result, max abs / rel error vs TF graph")


def check_text(r: dict, prefix: str) -> str:
    if f"{prefix}check" not in r:
        return "-"
    errors = f" {r[prefix + 'max_abs']:.2g}/{r[prefix + 'max_rel']:.2g}" if f"{prefix}max_abs" in r else ""
    return f"{r[prefix + 'check']}{errors}"


def format_row(r: dict, engines: tuple[Engine, ...] = ()) -> str:
    """One row of the speed table; an engine missing from the row (skipped, failed) shows "-"."""
    g, x, o = r.get("tf_graph"), r.get("tf_xla"), r.get("ours")
    best_tf = min((v for v in (g, x) if v is not None), default=None)
    cols = "".join(f" {_ms(r.get(e.name))}" for e in engines)
    engine_ms = [r[e.name] for e in engines if isinstance(r.get(e.name), float)]
    vs_engine = f" {_x(_div(o, min(engine_ms)) if engine_ms else None)}" if engines else ""
    kernels = f"{r['kernels']} ({r['dnnl']})" if "kernels" in r else "-"
    checks = "; ".join([f"ours {check_text(r, '')}"] + [
        f"{e.title} {check_text(r, e.name + '_')}" for e in engines if f"{e.name}_check" in r])
    return (f"{r['workload']:{NAME}s} {_ms(g)} {_ms(x)}{cols} {_ms(o)} {_x(_div(best_tf, o), 9)} "
            f"{_x(_div(g, o))} {_x(_div(x, o), 7)}{vs_engine} {r.get('clusters', '-'):>4} {kernels:>11s} "
            f"{r.get('path', '-'):>5s}  {checks}")


def compile_header(engines: tuple[Engine, ...]) -> str:
    cols = "".join(f" {e.title:>9s}" for e in engines)
    return (f"{'workload':{NAME}s} {'cold':>7s} {'warm':>7s} {'new proc':>8s} {'XLA':>7s} {'cold/XLA':>8s} "
            f"{'new/XLA':>8s}{cols}")


def format_compile_row(r: dict, engines: tuple[Engine, ...] = ()) -> str:
    """One row of the compile table (seconds; see the module docstring for what each column times)."""
    cold = r["compile_cold_s"] + r["first_call_s"] if "first_call_s" in r else None
    new, xla = r.get("compile_new_process_s"), r.get("xla_compile_s")
    cols = "".join(f" {_s(r.get(e.name + '_compile_s'), 9)}" for e in engines)
    return (f"{r['workload']:{NAME}s} {_s(cold)} {_s(r.get('compile_warm_s'))} {_s(new, 8)} {_s(xla)} "
            f"{_x(_div(cold, xla))} {_x(_div(new, xla))}{cols}")


def footnotes(rows: list[dict], engines: tuple[Engine, ...]) -> list[str]:
    """Why a row has no engine column, why ours or XLA failed, whether a warm compile missed the cache."""
    notes = []
    for r in rows:
        name = r["workload"]
        skipped: dict[str, list[str]] = {}  # reason -> the engines it kept off this row
        for e in engines:
            if f"{e.name}_skip" in r:
                skipped.setdefault(r[f"{e.name}_skip"], []).append(e.title)
        notes += [f"{name}: {', '.join(titles)} -: {reason}" for reason, titles in skipped.items()]
        if "traceback" in r:
            notes.append(f"{name}: ours {r['check']}\n{r['traceback'][-3000:]}")
        if "xla_error" in r:
            notes.append(f"{name}: TF XLA failed: {r['xla_error']}")
        if "new_process_error" in r:
            notes.append(f"{name}: new-process warm compile failed: {r['new_process_error']}")
        for key, label in (("cache_hit_warm", "same-process warm"), ("cache_hit_new_process", "new-process warm")):
            if r.get(key) is False:
                notes.append(f"{name}: the {label} compile missed the kernel cache")
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--filter", default=None, help="only rows whose name contains this text")
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per engine per row")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved measuring rounds")
    parser.add_argument("--cache_dir", default=None, help="kernel cache (default: a fresh empty directory)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--no_new_process", action="store_true", help="leave out the new-process warm compile")
    parser.add_argument("--warm_child", default=None, help=argparse.SUPPRESS)  # see warm_in_new_process
    args = parser.parse_args()
    if args.warm_child is not None:
        return warm_child(args.warm_child)

    engines = tuple(available())
    missing = [e.title for e in ENGINES if e not in engines]
    with tempfile.TemporaryDirectory(prefix="tfxla_bench_cache_") as fresh:
        set_cache_dir(args.cache_dir or fresh)
        print(f"tfxla_plugin.function vs TF {tf.__version__}"
              f"{''.join(', ' + e.title for e in engines)} on {os.cpu_count()} CPUs; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; kernel cache {args.cache_dir or fresh}"
              f"{'; not installed: ' + ', '.join(missing) + ' (pip install -e .[bench])' if missing else ''}")
        print("median ms per call; best/ours = faster TF mode / ours (> 1: we are faster); "
              "ours/eng = ours / the best engine (> 1: we are slower); kernels (oneDNN primitives)")
        print(header(engines), flush=True)
        rows = []
        for row in ROWS:
            if args.filter and args.filter not in row.name:
                continue
            try:
                r = run_row(row, args.seconds, args.rounds, engines, not args.no_new_process)
            except Exception as e:  # noqa: BLE001
                r = {"workload": row.name, "check": f"FAILED (TF): {type(e).__name__}: {e}"}
            rows.append(r)
            print(format_row(r, engines), flush=True)
        print("\ncompile s: ours cold (empty cache, compile + first call), warm (same process, a new "
              "function: compile), new proc (a new process on the disk cache: compile + first call); "
              "XLA's first call; engines: convert + compile + first call")
        print(compile_header(engines))
        for r in rows:
            print(format_compile_row(r, engines))
        notes = footnotes(rows, engines)
        if notes:
            print("\n" + "\n".join(f"- {n}" for n in notes))
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump([{k: v for k, v in r.items() if k != "traceback"} for r in rows], fh, indent=1)


if __name__ == "__main__":
    main()
