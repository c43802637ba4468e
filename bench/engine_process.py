"""Each inference engine of ``bench.function_bench`` in a process of its own, stopped while others are timed.

With OpenVINO and ONNX Runtime loaded in the benchmark's process, their thread pools went on spinning
after their rounds and took the cores from ours (ResNet50 ours 72.1 ms with the engines loaded, 42.7 ms
in a process without them). So the benchmark's process never imports an engine: ``RemoteEngine``
starts ``python -m bench.engine_process ENGINE ROW DIR``, which builds the row's case itself (the rows
are seeded: the same weights and inputs as the parent's), converts and compiles it with its engine
(``bench.engines``, the engine's default threading: its own best numbers), writes the outputs of one
call to ``DIR/<engine>.npz`` for the parent to check against TF, and then answers one JSON line per
command line on stdin:

    {"op": "calibrate"}        -> {"per_call": seconds}   one call, then the best of two timed ones
    {"op": "sample", "n": N}   -> {"samples": [...]}      one untimed call, then N timed calls
    {"op": "exit"}

Between its commands the parent stops the child (``SIGSTOP``; ``SIGCONT`` before the next one), so no
thread of an engine runs, spinning or not, while TF or ours is timed; ``Sampler`` is the same
calibrate/sample interface for a call in this process. ``ENGINE`` is a name in ``bench.engines.ENGINES``
and ``ROW`` a name in ``bench.models.ROWS``; either may instead be ``module:attribute`` (the tests' stand-ins).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def timed_call(fn: Callable[[], object]) -> float:
    """Seconds of one call of ``fn``. On the CPU an eager op and a ``tf.function`` call return when their
    work is done, so their outputs are not read back: ``.numpy()`` copies them (0.3-0.5 ms for softmax's
    4 MB here), which the engines, writing into pre-bound outputs, do not pay either."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Sampler:
    """A call measured in this process: ``calibrate`` (one call, then the best of two timed calls) and
    ``sample(n)`` (one untimed call, then ``n`` timed ones)."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn

    def calibrate(self) -> float:
        self.fn()
        return min(timed_call(self.fn) for _ in range(2))

    def sample(self, n: int) -> list[float]:
        self.fn()
        return [timed_call(self.fn) for _ in range(n)]


class EngineUnavailable(RuntimeError):
    """The child could not run the engine on the row (skipped or failed): the message says why."""


class RemoteEngine:
    """An engine in its own process (module docstring): started, converted and checked by the constructor,
    stopped except while it answers a command. ``compile_s``: its conversion + compilation + first call;
    ``outputs``: that call's results. Raises ``EngineUnavailable`` with the child's reason."""

    def __init__(self, engine: str, row: str, directory: str | os.PathLike):
        # stderr to a file: a converter's log would fill a pipe nobody reads while the child works
        self.log = Path(directory) / f"{engine.replace(':', '_')}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "bench.engine_process", engine, row,
                                          str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, text=True, env=dict(os.environ))
        self.pid = self.proc.pid
        hello = self._reply()
        if "skip" in hello:
            self.close()
            raise EngineUnavailable(hello["skip"])
        self.compile_s = float(hello["compile_s"])
        with np.load(hello["outputs"]) as npz:
            self.outputs = [npz[f"arr_{k}"] for k in range(len(npz.files))]
        self._stop()

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=60)
                tail = (self.log.read_text(errors="replace").strip().splitlines() or [""])[-1]
                raise EngineUnavailable(f"failed: the engine process exited ({self.proc.returncode}): {tail}")
            if line.startswith("{"):
                return json.loads(line)

    def _command(self, **command) -> dict:
        assert self.proc.stdin is not None
        os.kill(self.pid, signal.SIGCONT)
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
            return self._reply()
        finally:
            self._stop()

    def _stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGSTOP)

    def calibrate(self) -> float:
        return float(self._command(op="calibrate")["per_call"])

    def sample(self, n: int) -> list[float]:
        return [float(s) for s in self._command(op="sample", n=n)["samples"]]

    def close(self) -> None:
        """Ends the child (asks it to exit; kills it if it does not within 30 s)."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def resolve(ref: str, table: dict):
    """``table[ref]``, or for ``module:attribute`` that attribute."""
    if ":" in ref:
        module, attr = ref.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    return table[ref]


def child(engine_ref: str, row_ref: str, directory: str) -> None:
    """The engine process (module docstring)."""
    import tensorflow as tf

    from bench.engines import ENGINES, skip_reason
    from bench.models import ROWS, build_case

    def say(**message) -> None:
        print(json.dumps(message), flush=True)

    engine = resolve(engine_ref, {e.name: e for e in ENGINES})
    case = build_case(resolve(row_ref, {r.name: r for r in ROWS}))
    reason = skip_reason(case)
    if reason is not None:
        return say(skip=reason)
    try:
        prepared = engine.prepare(case, tf.function(case.fn))
        path = Path(directory) / f"{engine.name}.npz"
        np.savez(path, *prepared.outputs())
    except Exception as e:  # noqa: BLE001 - the parent reports it in the row's footnotes
        # the whole message on one line: a converter names the unsupported ops on a later line
        return say(skip=f"failed: {type(e).__name__}: {' '.join(str(e).split())[:320]}")
    say(compile_s=prepared.compile_s, outputs=str(path), pid=os.getpid())
    sampler = Sampler(prepared.call)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "calibrate":
            say(per_call=sampler.calibrate())
        elif command["op"] == "sample":
            say(samples=sampler.sample(int(command["n"])))
        else:
            break


if __name__ == "__main__":
    child(*sys.argv[1:4])
