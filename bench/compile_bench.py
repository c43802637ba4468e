"""Compile time of ``tfxla_plugin.function`` against TF XLA's first call, on Keras applications (issue 19).

    python -m bench.compile_bench [--models NASNetMobile,DenseNet121] [--size 96] [--batch 1] [--json FILE]

Per model (``bench.models.application``: seeded weights, randomized batch-norm statistics), each
measurement in a new Python process of its own, one after another, so none inherits another's caches:

* ``cold``: ours on an empty kernel cache (a fresh ``--cache_dir`` through ``TFXLA_FLAGS``): trace,
  cluster, lower, optimize, generate, C compile, then the first call (loads the kernel, builds the
  oneDNN primitives); its result checked against TF graph mode. Reported: wall seconds, the CPU
  seconds of the process and of its children (gcc) and the number of compiler runs
  (``backends.kernel_cache.builds``) and code generations (``backends.cpu.codegen.runs``). Then ``warm``: a new ``tfxla_plugin.function`` of the same model
  in that process (retrace ... generate, a cache hit, no call), wall seconds and compiler runs.
* ``new process``: ours compile + first call in a new process on the cache ``cold`` filled (a second
  run of the program), wall and CPU seconds, compiler runs and code generations (0 and 0 when the
  kernel plans hit: ``tfxla_plugin/kernel_plan.py``).
* ``XLA``: ``tf.function(jit_compile=True)``'s first call (trace + compile + run) in a new process.

Then cold/XLA and new/XLA (issue 19's targets: cold within 2x of XLA, new process within 0.2x). The
machine's load distorts wall time: run it on a quiet machine (the CPU columns are less distorted).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = ("NASNetMobile", "ConvNeXtTiny", "DenseNet121", "MobileNetV2", "ResNet50", "EfficientNetB0")


def _cpu() -> tuple[float, float]:
    """(CPU seconds of this process, of its finished children)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def measure_ours(case, warm: bool = True) -> dict:
    """Our compile + first call of ``case`` on the kernel cache of TFXLA_FLAGS (its result checked against
    TF graph mode), then (``warm``) a second ``tfxla_plugin.function`` of it compiled in this process."""
    import numpy as np
    import tensorflow as tf

    import tfxla_plugin
    from backends import kernel_cache
    from backends.cpu import codegen

    want = [np.asarray(t) for t in tf.nest.flatten(tf.function(case.fn)(*case.args))]
    fn = tfxla_plugin.function(case.fn, jit_compile=True)
    builds, runs, (cpu0, kids0), start = kernel_cache.builds(), codegen.runs(), _cpu(), time.perf_counter()
    compiled = fn.compiled_graph(*case.args)
    got = [np.asarray(t) for t in tf.nest.flatten(fn(*case.args))]
    out = {"s": time.perf_counter() - start, "cpu_s": _cpu()[0] - cpu0, "cc_cpu_s": _cpu()[1] - kids0,
           "cc_runs": kernel_cache.builds() - builds, "codegen_runs": codegen.runs() - runs,
           "clusters": len(compiled.clusters),
           "cache_hit": all(c.cache_hit for c in compiled.clusters),
           "max_rel": max(float(np.max(np.abs(g - w)) / max(float(np.max(np.abs(w))), 1e-30))
                          for g, w in zip(got, want))}
    if warm:
        again = tfxla_plugin.function(case.fn, jit_compile=True)
        builds, start = kernel_cache.builds(), time.perf_counter()
        again.compiled_graph(*case.args)
        out.update(warm_s=time.perf_counter() - start, warm_cc_runs=kernel_cache.builds() - builds)
    return out


def measure_xla(case) -> dict:
    import tensorflow as tf

    start = time.perf_counter()
    for t in tf.nest.flatten(tf.function(case.fn, jit_compile=True)(*case.args)):
        t.numpy()
    return {"s": time.perf_counter() - start}


def child(mode: str, model: str, size: int, batch: int) -> None:
    """One measurement in this (new) process: ``cold`` (with warm), ``new`` or ``xla``; prints JSON."""
    from bench.models import application

    case = application(model, size, batch)()
    result = measure_xla(case) if mode == "xla" else measure_ours(case, warm=mode == "cold")
    print(json.dumps(result), flush=True)


def run_child(mode: str, model: str, size: int, batch: int, cache_dir: str) -> dict:
    flags = [t for t in os.environ.get("TFXLA_FLAGS", "").split() if not t.startswith("--cache_dir=")]
    env = {**os.environ, "TFXLA_FLAGS": " ".join(flags + [f"--cache_dir={cache_dir}"])}
    proc = subprocess.run([sys.executable, "-m", "bench.compile_bench", "--child", mode, "--models", model,
                           "--size", str(size), "--batch", str(batch)], capture_output=True, text=True, env=env,
                          timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"}
    return json.loads(lines[-1])


def _s(x, width: int = 7) -> str:
    return f"{x:{width}.2f}" if isinstance(x, (int, float)) else f"{'-':>{width}s}"


HEADER = (f"{'model':16s} {'cold':>7s} {'cpu':>7s} {'gcc cpu':>7s} {'cc':>4s} {'warm':>7s} {'new proc':>8s} "
          f"{'cpu':>7s} {'cc':>3s} {'cg':>3s} {'XLA':>7s} {'cold/XLA':>8s} {'new/XLA':>8s}  check")


def format_row(name: str, r: dict) -> str:
    cold, new, xla = r.get("cold", {}), r.get("new", {}), r.get("xla", {})
    ratio = (lambda a, b: f"{a / b:7.2f}x" if isinstance(a, float) and isinstance(b, float) and b > 0
             else f"{'-':>8s}")
    errors = "; ".join(f"{k}: {v['error']}" for k, v in r.items() if "error" in v)
    check = errors or (f"max rel err {cold['max_rel']:.1e} vs TF" if "max_rel" in cold else "-")
    return (f"{name:16s} {_s(cold.get('s'))} {_s(cold.get('cpu_s'))} {_s(cold.get('cc_cpu_s'))} "
            f"{cold.get('cc_runs', '-'):>4} {_s(cold.get('warm_s'))} {_s(new.get('s'), 8)} {_s(new.get('cpu_s'))} "
            f"{new.get('cc_runs', '-'):>3} {new.get('codegen_runs', '-'):>3} "
            f"{_s(xla.get('s'))} {ratio(cold.get('s'), xla.get('s'))} {ratio(new.get('s'), xla.get('s'))}  {check}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated keras.applications names")
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one measurement (``child``)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.child, args.models, args.size, args.batch)
    print(f"compile seconds at {args.size}x{args.size} batch {args.batch}; load average "
          f"{os.getloadavg()[0]:.2f} (run on a quiet machine); cc: compiler runs, cg: code generations")
    print(HEADER, flush=True)
    results = {}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="tfxla_compile_bench_") as cache:
            r = {mode: run_child(mode, model, args.size, args.batch, cache) for mode in ("cold", "new", "xla")}
        results[model] = r
        print(format_row(model, r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
