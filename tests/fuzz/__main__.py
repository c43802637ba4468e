"""``python -m tests.fuzz --graphs N --seed S --jobs J``: run the fuzzer in subprocess batches.

Graphs ``[start, start + N)`` (or ``--only`` these indices) of seed ``S`` are split into batches of ``--batch`` graphs; each
batch is one ``tests.fuzz.worker`` process (TF imported once), at most ``--jobs`` at a time. A
worker that dies (signal, non-zero exit) or makes no progress for ``--timeout`` seconds is
killed; the graph it was running is counted as ``crash`` and the rest of its batch is run by a
new worker, so every graph is counted once. SIGINT or SIGTERM stops the run and reports the graphs
finished so far. All workers share one kernel cache directory owned
by the run (a temporary directory, removed at the end, unless ``--cache-dir`` names one).
Prints the counts table and, for every graph that is not ok/unsupported, its status, what
differed and a Python repro. Exits 1 when any graph crashed, mismatched or raised unclearly.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz.generator import generate

STATUSES = ("ok", "tf_differs", "xla_semantics", "unsupported", "mismatch", "crash", "unclear")
FAILURES = ("mismatch", "crash", "unclear")
ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Batch:
    indices: list[int]
    out: Path
    proc: subprocess.Popen | None = None
    read: int = 0            # bytes of ``out`` consumed
    running: int | None = None  # the index started and not finished
    last_progress: float = 0.0


def _spawn(seed: int, indices: list[int], workdir: Path, env: dict) -> Batch:
    out = workdir / f"batch_{indices[0]}_{time.monotonic_ns()}.jsonl"
    out.touch()
    cmd = [sys.executable, "-m", "tests.fuzz.worker", "--seed", str(seed),
           "--indices", ",".join(map(str, indices)), "--out", str(out)]
    with open(out.with_suffix(".stderr"), "wb") as err:  # a file, not a pipe: a full pipe would block the worker
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    return Batch(indices, out, proc, last_progress=time.monotonic())


def _poll(b: Batch, results: dict) -> None:
    with open(b.out) as f:
        f.seek(b.read)
        chunk = f.read()
    done = chunk.rfind("\n") + 1
    b.read += done
    for line in chunk[:done].splitlines():
        rec = json.loads(line)
        if "start" in rec:
            b.running = rec["start"]
        else:
            results[rec["index"]] = rec
            b.running = None
        b.last_progress = time.monotonic()


def run(seed: int, indices: list[int], jobs: int, batch: int, timeout: float, cache_dir: str | None,
        progress=None) -> dict[int, dict]:
    """Every graph's result record (``status``, ``detail``, ``seconds``), keyed by index."""
    own_cache = cache_dir is None
    cache = Path(cache_dir or tempfile.mkdtemp(prefix="tfxla_fuzz_cache_"))
    workdir = Path(tempfile.mkdtemp(prefix="tfxla_fuzz_"))
    env = dict(os.environ, TFXLA_CACHE_DIR=str(cache), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    pending = [indices[k:k + batch] for k in range(0, len(indices), batch)]
    running: list[Batch] = []
    results: dict[int, dict] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                running.append(_spawn(seed, pending.pop(0), workdir, env))
            time.sleep(0.2)
            for b in list(running):
                _poll(b, results)
                rc = b.proc.poll()
                stalled = rc is None and time.monotonic() - b.last_progress > timeout
                if rc is None and not stalled:
                    continue
                if stalled:
                    os.killpg(b.proc.pid, signal.SIGKILL)
                    b.proc.wait()
                    _poll(b, results)
                running.remove(b)
                if b.running is not None and b.running not in results:
                    why = f"no progress for {timeout:g} s (killed)" if stalled else _death(b)
                    results[b.running] = {"index": b.running, "status": "crash", "detail": why, "seconds": None}
                missing = [i for i in b.indices if i not in results]
                if missing:
                    if rc not in (0, None) and b.running is None:  # died before or between graphs
                        results[missing[0]] = {"index": missing[0], "status": "crash",
                                               "detail": _death(b), "seconds": None}
                        missing = missing[1:]
                    if missing:
                        pending.insert(0, missing)
                if progress:
                    progress(results)
    except KeyboardInterrupt:  # SIGINT/SIGTERM: the graphs finished so far are the result
        pass
    finally:
        for b in running:
            os.killpg(b.proc.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
        if own_cache:
            shutil.rmtree(cache, ignore_errors=True)
    return results


def _death(b: Batch) -> str:
    rc = b.proc.returncode
    how = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    noise = ("WARNING: All log messages before absl", "oneDNN custom operations are on")
    tail = [line for line in b.out.with_suffix(".stderr").read_text(errors="replace").strip().splitlines()
            if not line.startswith(noise[0]) and noise[1] not in line][-5:]
    return how + ("; stderr: " + " | ".join(tail) if tail else "")


def counts(results: dict[int, dict]) -> collections.Counter:
    return collections.Counter(r["status"] for r in results.values())


def report(seed: int, results: dict[int, dict], wall: float, *, repros: int = 50) -> str:
    c = counts(results)
    secs = sorted(r["seconds"] for r in results.values() if r["seconds"] is not None)
    lines = [f"seed {seed}: {len(results)} graphs in {wall:.0f} s "
             f"({wall / max(len(results), 1):.2f} s/graph wall; per graph median "
             f"{secs[len(secs) // 2] if secs else 0:.2f} s, max {secs[-1] if secs else 0:.1f} s)",
             "", "| status | graphs |", "|---|---|"]
    lines += [f"| {s} | {c.get(s, 0)} |" for s in STATUSES]
    failures = [results[i] for i in sorted(results) if results[i]["status"] in FAILURES]
    unsupported = collections.Counter(r["detail"].split("|", 1)[-1].strip() for r in results.values()
                                      if r["status"] == "unsupported")
    if unsupported:
        lines += ["", "unsupported (clear errors), by reason:"]
        lines += [f"  {n:5d}  {why[:160]}" for why, n in unsupported.most_common(20)]
    for status, what in (("tf_differs", "tf.function disagrees with TF eager and we match tf.function"),
                         ("xla_semantics", "TF eager disagrees with TF's XLA and we match XLA")):
        listed = sorted((r for r in results.values() if r["status"] == status), key=lambda r: r["index"])
        if listed:
            lines += ["", f"{status} ({what}):"]
            lines += [f"  index {r['index']} ({','.join(generate(seed, r['index']).op_kinds)}): {r['detail'][:200]}"
                      for r in listed[:30]]
    for r in failures[:repros]:
        lines += ["", f"=== {r['status']} graph seed={seed} index={r['index']}: {r['detail']}",
                  generate(seed, r["index"]).repro()]
    if len(failures) > repros:
        lines.append(f"... and {len(failures) - repros} more failures (indices "
                     f"{[r['index'] for r in failures[repros:]][:200]})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graphs", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first graph index (to resume or bisect)")
    p.add_argument("--only", default=None, help="comma-separated graph indices instead of --start/--graphs")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--batch", type=int, default=150, help="graphs per worker process")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds without progress before a kill")
    p.add_argument("--cache-dir", default=None, help="kernel cache (default: a temporary one for the run)")
    p.add_argument("--repros", type=int, default=50, help="print at most this many failure repros")
    p.add_argument("--json", default=None, help="also write every result record to this file")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    last = [0.0]
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill PID: report what was reached

    def progress(results):
        if time.monotonic() - last[0] > 60:
            last[0] = time.monotonic()
            c = counts(results)
            print(f"[{time.monotonic() - t0:.0f} s] {len(results)}/{len(indices)} "
                  + " ".join(f"{s}={c.get(s, 0)}" for s in STATUSES), flush=True)

    indices = [int(i) for i in a.only.split(",")] if a.only else list(range(a.start, a.start + a.graphs))
    results = run(a.seed, indices, a.jobs, a.batch, a.timeout, a.cache_dir, progress)
    if a.json:
        Path(a.json).write_text(json.dumps([results[i] for i in sorted(results)], indent=0))
    if len(results) < len(indices):
        print(f"interrupted: {len(results)} of {len(indices)} graphs ran", flush=True)
    print(report(a.seed, results, time.monotonic() - t0, repros=a.repros), flush=True)
    return 1 if any(r["status"] in FAILURES for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
