"""How our kernels hold their speed on a busy machine, against ``tf.function`` and ``tf.function(jit_compile=True)``.

    python -m bench.contention_bench [--rows NAME ...] [--filter TEXT] [--seconds S] [--rounds R]
                                     [--load_row NAME] [--conditions quiet,cpu_bound,our_kernels]
                                     [--cache_dir DIR] [--json FILE]

Each selected row of ``bench/models.py`` (default: softmax, layer norm, MLP batch 64, small CNN batch 32,
MobileNetV2 batch 1, MLP train step; ``--rows`` picks rows whose names contain any of the given texts,
``all`` picks every row, ``--filter`` keeps those containing its text) is built and checked against TF
graph mode once (``bench.function_bench.prepare_row``), then timed with the same engines
(ours = ``tfxla_plugin.function(jit_compile=True)``, TF graph, TF XLA; interleaved rounds, medians)
under three conditions, one after the other, in this one run:

- ``quiet``: nothing of ours running beside it;
- ``cpu_bound`` (a): one pure busy-loop process per CPU this process may run on (``os.sched_getaffinity``);
- ``our_kernels`` (b): a second process running our kernels in a loop (``--load_row``, default the
  softmax row, compiled with ``tfxla_plugin.function`` in a process started with this environment,
  so it shares the kernel cache).

The load processes of a condition are started before it is measured and killed after it, also on an
error or Ctrl-C. Each one writes a line on a pipe once it is running (the kernel process: once its
function is compiled and has been called), and measuring waits for those lines. A load process that
dies during the measurement marks the condition ``load died``.

Per row it prints the ms per call of each engine under each condition, ours/TF graph and ours/TF XLA
(> 1: we are slower), and the issue's acceptance figures: for (a) and (b), (ours/TF graph under load)
/ (ours/TF graph quiet), which should be at most 1.25, and whether ours is slower than TF graph mode
under that load. Before anything it prints the 1-minute load average and warns above 0.5: another
process on the machine changes every figure here. This is a benchmark, not a test: a failing row is
reported and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.engine_process import timed_call
from bench.function_bench import measure, prepare_row, set_cache_dir, sync
from bench.models import ROWS, Row

DEFAULT_ROWS = ("softmax [1024,1024]", "layer norm [512,1024]", "MLP 784-512-512-10 batch 64",
                "small CNN batch 32", "MobileNetV2 224 batch 1", "MLP train step SGD batch 64")
CONDITIONS = ("quiet", "cpu_bound", "our_kernels")
ACCEPT = 1.25  # the bound on (ours/TF graph under load) / (ours/TF graph quiet)
QUIET_LOAD = 0.5  # 1-minute load average above which the machine is not quiet
REPO = Path(__file__).resolve().parent.parent

# Run first in every load process: die with this process (even when it is killed without a finally).
PRELUDE = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != {ppid}:
    sys.exit(0)
"""
BUSY = "sys.stdout.write('ready\\n'); sys.stdout.flush()\nwhile True:\n    pass\n"


@dataclass
class Load:
    """The load processes of one condition: started by ``start``, always reaped by ``stop``."""
    condition: str
    codes: list[str]
    timeout_s: float = 600.0
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    start_s: float = 0.0

    def __enter__(self) -> Load:
        start = time.perf_counter()
        try:
            for code in self.codes:
                log = tempfile.TemporaryFile()
                self.logs.append(log)
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-c", PRELUDE.format(ppid=os.getpid()) + code], cwd=REPO,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log))
            self.ready = [self._wait_ready(p, log, start) for p, log in zip(self.procs, self.logs)]
        except BaseException:
            self.stop()
            raise
        self.start_s = time.perf_counter() - start
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self, proc: subprocess.Popen, log, start: float) -> str:
        """The process's ``ready`` line (other lines on its stdout are skipped)."""
        why, seen = f"not ready after {self.timeout_s:.0f} s", b""
        fd = proc.stdout.fileno()  # read unbuffered: a buffered reader would hide lines from select
        while select.select([fd], [], [], max(0.0, self.timeout_s - (time.perf_counter() - start)))[0]:
            chunk = os.read(fd, 4096)
            seen += chunk
            ready = [line for line in seen.split(b"\n")[:-1] if line.startswith(b"ready")]
            if ready:
                return ready[0].decode(errors="replace").strip()
            if not chunk:  # end of its stdout: it is exiting
                try:
                    why = f"exited with status {proc.wait(timeout=30)}"
                except subprocess.TimeoutExpired:
                    why = "closed its stdout"
                break
        log.seek(0)
        tail = log.read()[-2000:].decode(errors="replace")
        raise RuntimeError(f"{self.condition} load process {proc.pid} {why}:\n{tail}")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
        for log in self.logs:
            log.close()


def load_worker(name: str) -> None:
    """The ``our_kernels`` load: compile row ``name`` with tfxla_plugin, say ready, call it forever."""
    import tfxla_plugin

    (row,) = [r for r in ROWS if r.name == name]
    case = row.build()
    ours = tfxla_plugin.function(case.fn, jit_compile=True)
    clusters = len(ours.compiled_graph(*case.args).clusters)
    if not clusters:
        raise SystemExit(f"{name}: nothing compiled into our kernels")
    call = sync(ours, case.args)
    ms = 1e3 * min(timed_call(call) for _ in range(3))
    sys.stdout.write(f"ready {name}: {clusters} cluster(s), {ms:.3f} ms per call\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # nobody reads the pipe from now on
    while True:
        call()


def load_codes(condition: str, load_row: str, busy_procs: int) -> list[str]:
    if condition == "cpu_bound":
        return [BUSY] * busy_procs
    if condition == "our_kernels":
        return [f"from bench.contention_bench import load_worker\nload_worker({load_row!r})\n"]
    return []


def label(condition: str, load_row: str, busy_procs: int) -> str:
    return {"quiet": "quiet", "cpu_bound": f"(a) {busy_procs} busy loop(s)",
            "our_kernels": f"(b) ours beside: {load_row}"}[condition]


def run_row(row: Row, conditions: tuple[str, ...], seconds: float, rounds: int, load_row: str,
            busy_procs: int) -> dict:
    """One row: built and checked once, then timed under each condition with its load running."""
    out, engines, case = prepare_row(row)
    out["conditions"] = {}
    if "ours" not in engines:
        return out
    for condition in conditions:
        with Load(condition, load_codes(condition, load_row, busy_procs)) as load:
            ms = measure(row, case, engines, seconds, rounds)
            died = not load.alive()
        rec: dict = dict(ms, load_pids=load.pids, load_ready=load.ready, load_start_s=load.start_s,
                         load_died=died)
        rec["ours/graph"] = ms["ours"] / ms["tf_graph"]
        if "tf_xla" in ms:
            rec["ours/xla"] = ms["ours"] / ms["tf_xla"]
        out["conditions"][condition] = rec
    quiet = out["conditions"].get("quiet")
    out["acceptance"] = {}
    for condition, rec in out["conditions"].items():
        if condition != "quiet" and quiet is not None:
            ratio = rec["ours/graph"] / quiet["ours/graph"]
            out["acceptance"][condition] = {"vs_quiet": ratio, "ok": ratio <= ACCEPT and not rec["load_died"],
                                            "slower_than_graph": rec["ours"] > rec["tf_graph"]}
    return out


def _ms(x) -> str:
    return f"{x:9.3f}" if isinstance(x, float) else f"{'-':>9s}"


def _x(x) -> str:
    return f"{x:10.2f}x" if isinstance(x, float) else f"{'-':>11s}"


def verdict(a: dict) -> str:
    return f"{a['vs_quiet']:.2f}x {'ok' if a['ok'] else 'OVER'}"


def format_row(r: dict, load_row: str, busy_procs: int) -> str:
    lines = [f"== {r['workload']}: check {r['check']}; path {r.get('path', '-')}",
             f"   {'condition':40s} {'TF graph':>9s} {'TF XLA':>9s} {'ours':>9s} {'ours/graph':>11s} {'ours/XLA':>11s}"]
    for condition, c in r.get("conditions", {}).items():
        died = "  (load died)" if c["load_died"] else ""
        lines.append(f"   {label(condition, load_row, busy_procs)[:40]:40s} {_ms(c.get('tf_graph'))} "
                     f"{_ms(c.get('tf_xla'))} {_ms(c.get('ours'))} {_x(c.get('ours/graph'))} "
                     f"{_x(c.get('ours/xla'))}{died}")
    for condition, a in r.get("acceptance", {}).items():
        lines.append(f"   {label(condition, load_row, busy_procs)}: ours/graph {a['vs_quiet']:.2f}x its quiet value "
                     f"({'ok' if a['ok'] else 'OVER'}: <= {ACCEPT}x); ours slower than TF graph: "
                     f"{'YES' if a['slower_than_graph'] else 'no'}")
    return "\n".join(lines)


SUMMARY_HEADER = (f"{'workload':30s} {'(a) vs quiet':>13s} {'(b) vs quiet':>13s} "
                  f"{'(a) slower':>10s} {'(b) slower':>10s}")


def format_summary(r: dict) -> str:
    acc = r.get("acceptance", {})
    ratio = lambda c: verdict(acc[c]) if c in acc else "-"  # noqa: E731
    slower = lambda c: ("YES" if acc[c]["slower_than_graph"] else "no") if c in acc else "-"  # noqa: E731
    return (f"{r['workload'][:30]:30s} {ratio('cpu_bound'):>13s} {ratio('our_kernels'):>13s} "
            f"{slower('cpu_bound'):>10s} {slower('our_kernels'):>10s}")


def select_rows(names: list[str] | None, text: str | None) -> list[Row]:
    """``names``: rows whose names contain any of them (``all``: every row); neither it nor ``text``:
    the default rows; ``text``: only rows whose names contain it."""
    if names is None:
        picked = list(ROWS) if text else [r for r in ROWS if r.name in DEFAULT_ROWS]
    elif names == ["all"]:
        picked = list(ROWS)
    else:
        missing = [n for n in names if not any(n in r.name for r in ROWS)]
        if missing:
            raise SystemExit(f"no row named like {missing}; rows: {[r.name for r in ROWS]}")
        picked = [r for r in ROWS if any(n in r.name for n in names)]
    return [r for r in picked if not text or text in r.name]


def load_row_name(text: str) -> str:
    named = [r.name for r in ROWS if text in r.name]
    if len(named) != 1:
        raise SystemExit(f"--load_row {text!r} names {len(named)} rows: {named}")
    return named[0]


def run(rows: list[Row], conditions: tuple[str, ...] = CONDITIONS, seconds: float = 1.5, rounds: int = 5,
        load_row: str = "softmax [1024,1024]", busy_procs: int | None = None, echo=print) -> dict:
    """Measure ``rows`` under ``conditions``; ``echo`` gets each printed line. Returns the JSON record."""
    busy_procs = busy_procs or len(os.sched_getaffinity(0))
    load1 = os.getloadavg()[0]
    echo(f"contention: {len(rows)} row(s); {busy_procs} busy loop(s) for (a); (b) runs {load_row!r} with our "
         f"kernels; 1-minute load average {load1:.2f}")
    if load1 > QUIET_LOAD:
        echo(f"WARNING: load average {load1:.2f} > {QUIET_LOAD}: another process is using the CPUs, "
             "and it changes every figure here")
    echo("median ms per call; ours/graph, ours/XLA: our time / theirs (> 1: we are slower)")
    out: dict = {"cpus": busy_procs, "load_average_start": load1, "load_row": load_row,
                 "conditions": list(conditions), "accept": ACCEPT, "rows": []}
    for row in rows:
        try:
            r = run_row(row, conditions, seconds, rounds, load_row, busy_procs)
        except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
            r = {"workload": row.name, "check": f"FAILED: {type(e).__name__}: {e}"}
        out["rows"].append(r)
        echo(format_row(r, load_row, busy_procs))
        if "traceback" in r:
            echo(r["traceback"][-3000:])
    echo("\nacceptance: (ours/TF graph under load) / (ours/TF graph quiet) <= "
         f"{ACCEPT}, and ours not slower than TF graph under load")
    echo(SUMMARY_HEADER)
    for r in out["rows"]:
        echo(format_summary(r))
    out["load_average_end"] = os.getloadavg()[0]
    echo(f"load average at the end: {out['load_average_end']:.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", default=None, help="rows whose names contain any of these ('all')")
    parser.add_argument("--filter", default=None, help="only rows whose name contains this text")
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per engine per condition")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved measuring rounds")
    parser.add_argument("--load_row", default="softmax [1024,1024]", help="the row condition (b) runs")
    parser.add_argument("--conditions", default=",".join(CONDITIONS),
                        help="comma-separated, of " + ", ".join(CONDITIONS))
    parser.add_argument("--cache_dir", default=None, help="kernel cache (default: a fresh empty directory)")
    parser.add_argument("--json", default=None, help="also write everything to this JSON file")
    args = parser.parse_args()
    conditions = tuple(args.conditions.split(","))
    if set(conditions) - set(CONDITIONS):
        parser.error(f"unknown conditions {sorted(set(conditions) - set(CONDITIONS))}")
    rows = select_rows(args.rows, args.filter)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the load processes are killed
    with tempfile.TemporaryDirectory(prefix="tfxla_bench_cache_") as fresh:
        set_cache_dir(args.cache_dir or fresh)  # inherited by the (b) process
        out = run(rows, conditions, args.seconds, args.rounds, load_row_name(args.load_row),
                  echo=lambda s: print(s, flush=True))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**out, "rows": [{k: v for k, v in r.items() if k != "traceback"} for r in out["rows"]]},
                      fh, indent=1)


if __name__ == "__main__":
    main()
