"""The GPU check: every CUDA test module and corpus case on the GPU against the evaluator, the host
launchers the TfxlaLaunch op loads (through ctypes), the GPU-only pytest tests, and the benchmarks;
writes ``report.md`` and ``report.json``.

    python -m tests.gpu.check --out DIR [--budget SECONDS] [--repeats N] [--emulate] [--limit N]

Run by ``tests/gpu/run.sh`` after it made PyCUDA importable. Needs no TensorFlow (the corpus
comes from ``tests/gpu/corpus.npz``). Every stage is timed and guarded: a failing stage is
reported and the next one still runs; stages are skipped once ``--budget`` is spent.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


class Report:
    def __init__(self, out: Path, budget: float):
        self.out = out
        self.start = time.monotonic()
        self.budget = budget
        self.data: dict = {"stages": {}}
        self.lines: list[str] = ["# tfxla CUDA backend: GPU check", ""]
        self.emulate = False
        self.limit: int | None = None

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def log(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)
        self.save()

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "report.md").write_text("\n".join(self.lines) + "\n")
        (self.out / "report.json").write_text(json.dumps(self.data, indent=1, default=str))

    def stage(self, name: str, fn, min_left: float = 20.0) -> None:
        if self.left() < min_left:
            self.log(f"\n## {name}\nSKIPPED: time budget spent ({self.left():.0f} s left)")
            self.data["stages"][name] = {"skipped": True}
            return
        self.log(f"\n## {name}")
        t = time.monotonic()
        try:
            result = fn(self)
            self.data["stages"][name] = {"seconds": time.monotonic() - t, "result": result}
        except Exception as e:  # noqa: BLE001
            self.log(f"FAILED: {type(e).__name__}: {e}\n```\n{traceback.format_exc()}```")
            self.data["stages"][name] = {"seconds": time.monotonic() - t, "error": f"{type(e).__name__}: {e}"}
        self.log(f"({time.monotonic() - t:.1f} s)")


def environment(rep: Report):
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                ["nvcc", "--version"]):
        try:
            info[cmd[0]] = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError as e:
            info[cmd[0]] = f"unavailable: {e}"
    if rep.emulate:
        rep.log("- device: host emulator (--emulate: a dry run of this script without a GPU)")
        return info
    import pycuda
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    dev = drv.Context.get_device()
    info["pycuda"] = pycuda.VERSION_TEXT
    info["device"] = f"{dev.name()} (sm_{dev.compute_capability()[0]}{dev.compute_capability()[1]}, " \
                     f"{dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)} SMs)"
    try:
        import jax
        info["jax"] = f"{jax.__version__} {jax.devices()}"
    except Exception as e:  # noqa: BLE001
        info["jax"] = f"unavailable: {e}"
    for k, v in info.items():
        rep.log(f"- {k}: {v}".replace("\n", " | "))
    return info


def correctness(rep: Report):
    """Every hand-written module and corpus case, compiled (nvcc on all cores) and run on the GPU."""
    import hlo
    import backends.cuda as cuda
    from backends.cuda.pipeline import optimize
    from tests.gpu.cases import MODULES, compare, corpus, random_args

    cache = os.environ.get("TFXLA_CACHE_DIR")
    items = []  # (name, original module, module to compile, inputs)
    for name, text in MODULES.items():
        m = hlo.parse_module(text)
        items.append((name, m, optimize(m), random_args(m)))
    for name, stage, text, args in corpus()[:rep.limit]:
        m = hlo.parse_module(text)
        items.append((f"{name}/{stage}", m, optimize(m) if stage == "hlo" else m, args))
    rep.log(f"{len(items)} modules ({len(MODULES)} hand-written, {len(items) - len(MODULES)} corpus)")
    t = time.monotonic()
    if rep.emulate:
        from backends.cuda.host_emulator import host_executables

        exes = host_executables([m for _, _, m, _ in items], cache)
    else:
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
            futures = [pool.submit(cuda.compile, m, cuda.CompileOptions(cache_dir=cache)) for _, _, m, _ in items]
            exes = []
            for f in futures:
                try:
                    exes.append(f.result())
                except Exception as e:  # noqa: BLE001
                    exes.append(e)
    rep.log(f"compiled in {time.monotonic() - t:.1f} s")
    passed, failures, timings = 0, [], []
    for (name, original, _, args), exe in zip(items, exes):
        if rep.left() < 30:
            failures.append(f"{name}: not run (time budget)")
            continue
        try:
            if isinstance(exe, Exception):
                raise exe
            got = exe(*args)
            t0 = time.perf_counter()
            want = hlo.evaluate(original, *args)
            t_eval = time.perf_counter() - t0
            problems = compare(got, want, name)
            if problems:
                failures.extend(problems)
                continue
            passed += 1
            if not rep.emulate:
                timer = exe.device.timer()
                timer.start()
                exe.run_device()
                timings.append((name, timer.stop(), t_eval * 1e3))
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:400]}")
    where = "the host emulator" if rep.emulate else "the GPU"
    rep.log(f"**{passed} of {len(items)} modules match the evaluator on {where}**")
    for f in failures[:60]:
        rep.log(f"- FAIL {f}")
    slowest = sorted(timings, key=lambda x: -x[1])[:8]
    rep.log("slowest on the GPU (ms, GPU program / NumPy evaluator): " +
            ", ".join(f"{n} {g:.3f}/{e:.1f}" for n, g, e in slowest))
    return {"passed": passed, "total": len(items), "failures": failures, "timings": timings}


def launcher_stage(rep: Report):
    """The host launchers (``backends/cuda/host_launcher.py``: the shared objects the TfxlaLaunch op loads)
    of every hand-written module and every fourth corpus case, compiled by nvcc on all cores, loaded with
    ctypes (``tfxla_init``, then ``tfxla_run`` on NumPy buffers, as the op calls them; no TensorFlow, no
    PyCUDA) and compared with the evaluator. With --emulate: the same host code on the host emulator."""
    import hlo
    from backends.cuda.pipeline import optimize
    from backends.cpu.runtime import Kernel
    from backends.cuda.codegen import generate
    from backends.cuda.host_emulator import compile_emulated_launcher
    from backends.cuda.host_launcher import LauncherOptions, compile_launcher, launcher_source
    from tests.gpu.cases import MODULES, compare, corpus, random_args

    cache = os.environ.get("TFXLA_CACHE_DIR")
    items = []  # (name, original module, module to compile, inputs)
    for name, text in MODULES.items():
        m = hlo.parse_module(text)
        items.append((name, m, optimize(m), random_args(m)))
    for name, stage, text, args in corpus()[::4][:rep.limit]:
        m = hlo.parse_module(text)
        items.append((f"{name}/{stage}", m, optimize(m) if stage == "hlo" else m, args))
    rep.log(f"{len(items)} launchers ({len(MODULES)} hand-written, {len(items) - len(MODULES)} corpus)")

    def build(m):
        if rep.emulate:
            return compile_emulated_launcher(launcher_source(generate(m)), cache).path
        return compile_launcher(m, LauncherOptions(cache_dir=cache)).path

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2 if rep.emulate else os.cpu_count() or 4) as pool:
        futures = [pool.submit(build, m) for _, _, m, _ in items]
    rep.log(f"compiled in {time.monotonic() - t:.1f} s")
    passed, failures, timings = 0, [], []
    for (name, original, _, args), future in zip(items, futures):
        if rep.left() < 30:
            failures.append(f"{name}: not run (time budget)")
            continue
        try:
            kernel = Kernel(future.result())  # tfxla_init: device buffers, stream
            got = kernel.run(*args)
            problems = compare(got, hlo.evaluate(original, *args), name)
            if problems:
                failures.extend(problems)
                continue
            passed += 1
            t0 = time.perf_counter()
            kernel.run(*args)
            timings.append((name, (time.perf_counter() - t0) * 1e3))
        except Exception as e:  # noqa: BLE001
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:400]}")
    where = "the host emulator" if rep.emulate else "the GPU"
    rep.log(f"**{passed} of {len(items)} host launchers match the evaluator on {where}** (ctypes: tfxla_init, "
            f"tfxla_run)")
    for f in failures[:40]:
        rep.log(f"- FAIL {f}")
    slowest = sorted(timings, key=lambda x: -x[1])[:6]
    rep.log("slowest tfxla_run calls (ms, copies in and out included): " +
            ", ".join(f"{n} {ms:.3f}" for n, ms in slowest))
    return {"passed": passed, "total": len(items), "failures": failures, "timings": timings}


def pytest_stage(rep: Report):
    try:
        import pytest  # noqa: F401
    except ImportError:
        rep.log("pytest is not installed: the GPU tests ran above as part of the correctness stage")
        return {"skipped": "no pytest"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_gpu.py",
           "tests/test_cuda_codegen.py", "tests/test_cuda_golden.py"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, rep.left() - 60))
    tail = "\n".join(proc.stdout.strip().splitlines()[-25:])
    rep.log(f"`{' '.join(cmd[2:])}` exit {proc.returncode}\n```\n{tail}\n```")
    result = {"returncode": proc.returncode, "tail": tail}
    # The launcher tests that need a GPU (the rest of that file runs in CI without one).
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_launcher.py",
           "-k", "on_the_gpu"]
    if rep.left() > 60:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, rep.left() - 30))
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        rep.log(f"`{' '.join(cmd[2:])}` exit {proc.returncode}\n```\n{tail}\n```")
        result["launcher"] = {"returncode": proc.returncode, "tail": tail}
    return result


def bench_stage(rep: Report, repeats: int):
    from bench import cuda_bench

    results = cuda_bench.run(repeats=repeats, cache_dir=os.environ.get("TFXLA_CACHE_DIR"), log=lambda s: None)
    for r in results:
        if "error" in r:
            rep.log(f"- {r['name']}: ERROR {r['error']}")
        elif r["name"] == "reduce_bw":
            rep.log(f"- reduce_sum((x*w+b)*mask), {r['elements']:.0e} f32: {r['ours_ms']:.3f} ms = "
                    f"{r['reduce_GBps']:.0f} GB/s; device copy {r['copy_GBps']:.0f} GB/s; "
                    f"**{100 * r['fraction_of_copy_bw']:.0f}% of copy bandwidth** (target 80%), "
                    f"correct: {r['ok']}; kernels {r['kernels']}")
        else:
            rep.log(f"- {r['name']} {r['shape']}: ours {r['ours_ms']:.3f} ms, jax.jit {r['jax_ms']:.3f} ms, "
                    f"**{r['speedup_vs_jax']:.2f}x** (target >= 1), correct: {r['ok']}; kernels {r['kernels']}"
                    + (f"; CUDA cores (no wmma) {r['cuda_cores_ms']:.3f} ms; TFLOPS ours {r['tflops_ours']:.1f}, "
                       f"jax {r['tflops_jax']:.1f}" if r["name"] == "matmul_f16" else ""))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/gpu/out")
    parser.add_argument("--budget", type=float, default=400.0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--emulate", action="store_true",
                        help="dry run without a GPU: kernels on the host emulator, no benchmarks")
    parser.add_argument("--limit", type=int, default=None, help="corpus entries to run (default: all)")
    args = parser.parse_args()
    rep = Report(Path(args.out), args.budget)
    rep.emulate, rep.limit = args.emulate, args.limit
    rep.stage("environment", environment)
    rep.stage("correctness: modules and corpus on the GPU vs the evaluator", correctness, min_left=60)
    if not args.emulate:
        rep.stage("benchmarks", lambda r: bench_stage(r, args.repeats), min_left=60)
    rep.stage("host launchers (the TfxlaLaunch op's .so) via ctypes vs the evaluator", launcher_stage, min_left=60)
    if not args.emulate:
        rep.stage("pytest (GPU, codegen, golden, launchers)", pytest_stage, min_left=45)
    rep.log(f"\ntotal {time.monotonic() - rep.start:.0f} s")
    rep.save()


if __name__ == "__main__":
    main()
