"""Running a hook scenario in a child process: the graph-optimizer plugin is process-wide (loaded once,
never unloaded, and TF aborts on a second one), so tests that load it never do so in the pytest process.

``run_child(script)`` runs ``PRELUDE + script`` with this interpreter and returns what the script passed
to ``report(**values)`` (JSON on the last line of stdout). The prelude gives the script ``records``: the
``tfxla_plugin`` log records (level name, message), and ``launch_ops(fn, *args)``: the op types of the
graphs TF actually ran for a call (``RunMetadata.function_graphs``, after Grappler).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

PRELUDE = textwrap.dedent("""
    import json, logging
    import numpy as np
    import tfxla_plugin  # before TensorFlow: the one-shot import hook registers the op (and --auto_jit)
    import tensorflow as tf
    from tensorflow.python.eager import context

    records = []

    class _Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage()))

    _logger = logging.getLogger("tfxla_plugin")
    _logger.addHandler(_Keep())
    _logger.setLevel(logging.INFO)

    def ran_ops(fn, *args):
        ctx = context.context()
        ctx.enable_run_metadata()
        ctx.export_run_metadata()  # drops what an earlier call left (TF adds a function's graphs late)
        try:
            out = fn(*args)
            meta = ctx.export_run_metadata()
        finally:
            ctx.disable_run_metadata()
        return out, sorted({n.op for g in meta.function_graphs for n in g.post_optimization_graph.node})

    def logged(level, text):
        return [m for lv, m in records if lv == level and text in m]

    def report(**values):
        print("REPORT " + json.dumps(values))
""")


def run_child(script: str, env: dict | None = None, timeout: int = 300) -> dict:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"the child reported nothing; stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1][len("REPORT "):])
    result["stderr"] = proc.stderr
    return result


__all__ = ["PRELUDE", "run_child"]
