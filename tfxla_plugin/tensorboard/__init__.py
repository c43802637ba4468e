"""TensorBoard export: see what the compiler did in TensorBoard's Graphs and Text dashboards.

    tfxla_plugin.tensorboard.write(f, x, w, logdir="/tmp/tb")      # f = tfxla_plugin.function(...)
    tensorboard --logdir /tmp/tb

One call writes these runs under ``logdir/<name>`` (``name`` defaults to the function's name):

==========================  ==================================================================================
run                         contents
==========================  ==================================================================================
``<name>/original``         graph: the traced graph as clustered, ``_XlaCluster="cluster_N"`` on clustered
                            nodes (Graphs > "Color by XLA Cluster"), ``tfxla_left_out`` reasons elsewhere;
                            text ``clustering`` (tables) and ``explanation`` (``explain_text``)
``<name>/rewritten``        graph: what TensorFlow runs, one ``TfxlaLaunch`` node per cluster (short attrs:
                            ``cluster``, ``op_count``, ``hlo_op_count``, ``kernel_hash``, ``backend``)
``<name>/hlo/<cluster>``    graph: the cluster's optimized HLO, fusions as name scopes (``fusion.3/...``);
                            text ``hlo_before_optimizations``, ``hlo_after_optimizations``, ``c_source``,
                            ``buffer_assignment``, ``fusion_decisions`` (fenced code blocks)
==========================  ==================================================================================

For a function the Grappler hook compiled (``tfxla_plugin.enable()``: a ``tf.function``, a
``ConcreteFunction``, a Keras model's steps), ``write`` (or ``write_hooked``) writes the same runs for each
function body the hook saw, from what it recorded (``hook.lookup``); several bodies (a Keras step and the
``jit_compile=True`` step it calls) go under ``<name>/<function>``. A body the hook left to TF has only
its ``original`` run (why its nodes stay in TF), a failed one none.

Every summary is at step 0. A run directory that already holds event files is an error unless
``overwrite=True`` (which deletes its old event files first), so the dashboard never mixes two
compilations. No graph attribute is 1 KiB or more (``graphs.ATTR_LIMIT``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import backends

from tfxla_plugin._requirements import require_tensorboard
from tfxla_plugin.tensorboard.graphs import ATTR_LIMIT, hlo_graph, original_graph, rewritten_graph
from tfxla_plugin.tensorboard.text import clustering_table, code_block, unfence

ORIGINAL_RUN = "original"
REWRITTEN_RUN = "rewritten"
HLO_RUN = "hlo"  # HLO runs are hlo/<cluster>
CLUSTER_TEXT_TAGS = ("hlo_before_optimizations", "hlo_after_optimizations", "c_source", "buffer_assignment",
                     "fusion_decisions")


@dataclass(frozen=True)
class Written:
    """What ``write`` wrote: run name (relative to ``logdir``) -> its directory."""

    logdir: str
    runs: dict[str, str] = field(default_factory=dict)


def run_name(text: str) -> str:
    """A run-name component: letters, digits, ``_ . -`` (``<lambda>`` -> ``lambda``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_.")
    return cleaned or "function"


class _Runs:
    def __init__(self, logdir: str | os.PathLike, name: str, overwrite: bool):
        self.logdir = Path(logdir)
        self.name = run_name(name)
        self.overwrite = overwrite
        self.runs: dict[str, str] = {}

    def writer(self, *parts: str):
        import tensorflow as tf

        path = self.logdir.joinpath(self.name, *parts)
        old = sorted(path.glob("events.out.tfevents.*")) if path.is_dir() else []
        if old and not self.overwrite:
            raise FileExistsError(f"tfxla_plugin.tensorboard: run directory {path} already holds event files; "
                                  f"pass overwrite=True or another name")
        for p in old:
            p.unlink()
        path.mkdir(parents=True, exist_ok=True)
        self.runs["/".join((self.name,) + parts)] = str(path)
        return tf.summary.create_file_writer(str(path))

    def write(self, parts: tuple[str, ...], graph_def=None, texts: dict[str, str] | None = None) -> None:
        import tensorflow as tf

        writer = self.writer(*parts)
        with writer.as_default():
            if graph_def is not None:
                tf.summary.graph(graph_def)
            for tag, text in (texts or {}).items():
                tf.summary.text(tag, tf.constant(text), step=0)
        writer.flush()
        writer.close()

    def result(self) -> Written:
        return Written(str(self.logdir), dict(self.runs))


def _check_logdir(logdir) -> None:
    require_tensorboard("tfxla_plugin.tensorboard")  # before anything is written to logdir
    if logdir is None or str(logdir) == "":
        raise ValueError("tfxla_plugin.tensorboard: logdir is required (a directory to write runs into)")
    if Path(logdir).exists() and not Path(logdir).is_dir():
        raise NotADirectoryError(f"tfxla_plugin.tensorboard: logdir {logdir} exists and is not a directory")


def launch_info(compiled_graph) -> dict[str, dict[str, object]]:
    """Cluster name -> the short attrs its launch node gets in the rewritten graph."""
    specs = {s.name: s for s in compiled_graph.analysis.clusters}
    return {c.name: {"op_count": len(specs[c.name].node_names) if c.name in specs else 0,
                     "hlo_op_count": sum(1 for _ in c.optimized.instructions()),
                     "kernel_hash": c.kernel_hash, "backend": getattr(c, "backend", backends.DEFAULT)}
            for c in compiled_graph.clusters}


def write_compiled_graph(compiled_graph, logdir: str | os.PathLike, name: str = "function", *,
                         overwrite: bool = False) -> Written:
    """Write the runs for one ``CompiledGraph`` (``f.compiled_graph(*args)``) under ``logdir/name``."""
    from tfxla_plugin.explain import explain_json, explain_text

    _check_logdir(logdir)
    runs = _Runs(logdir, name, overwrite)
    runs.write((ORIGINAL_RUN,), original_graph(compiled_graph.analysis),
               {"clustering": clustering_table(explain_json(compiled_graph)),
                "explanation": code_block(explain_text(compiled_graph))})
    if compiled_graph.rewritten is not None:  # (None: a graph the hook left to TF)
        runs.write((REWRITTEN_RUN,), rewritten_graph(compiled_graph.rewritten.graph_def, launch_info(compiled_graph)))
    for c in compiled_graph.clusters:
        texts = {"hlo_before_optimizations": code_block(c.hlo.to_text()),
                 "hlo_after_optimizations": code_block(c.optimized.to_text()),
                 "c_source": code_block(c.c_source, backends.get(c.backend).source_language),
                 "buffer_assignment": code_block(c.buffer_assignment),
                 "fusion_decisions": code_block(c.fusion_text())}
        runs.write((HLO_RUN, run_name(c.name)), hlo_graph(c.optimized), texts)
    return runs.result()


def write_graph_def(graph_def, logdir: str | os.PathLike, name: str, *, clustering: dict | None = None,
                    launch: dict[str, dict[str, object]] | None = None, overwrite: bool = False) -> Written:
    """Write an already rewritten GraphDef (a wrapped SavedModel's, as loaded) as ``<name>/rewritten``,
    with ``clustering`` (a ``summary_json`` dict, e.g. from the wrapped model's manifest) as text and
    ``launch`` (cluster name -> short attrs) set on the launch nodes."""
    _check_logdir(logdir)
    runs = _Runs(logdir, name, overwrite)
    texts = {"clustering": clustering_table(clustering)} if clustering else None
    runs.write((REWRITTEN_RUN,), rewritten_graph(graph_def, launch), texts)
    return runs.result()


def write(f, *args, logdir: str | os.PathLike, name: str | None = None, overwrite: bool = False,
          **kwargs) -> Written:
    """Compile ``f`` (a ``tfxla_plugin.function``) for ``args``/``kwargs`` if not yet compiled, and write its
    runs under ``logdir/<name>`` (default: the function's name). Returns the runs written."""
    from tfxla_plugin.api import CompiledFunction
    from tfxla_plugin.hook.lookup import concrete_functions

    if not isinstance(f, CompiledFunction):
        try:
            concrete_functions(f, *args, **kwargs)
        except TypeError:
            raise TypeError(f"tfxla_plugin.tensorboard.write: expected a tfxla_plugin.function, got "
                            f"{type(f).__name__}; wrap it with tfxla_plugin.function(fn, jit_compile=...), or pass "
                            f"a tf.function or Keras model the hook compiled") from None
        return write_hooked(f, *args, logdir=logdir, name=name, overwrite=overwrite, **kwargs)
    if f.jit_compile is False:
        raise ValueError("tfxla_plugin.tensorboard.write: this function has jit_compile=False, so nothing is "
                         "compiled; use jit_compile=True or \"auto\"")
    _check_logdir(logdir)
    compiled = f.compiled_graph(*args, **kwargs)
    return write_compiled_graph(compiled, logdir, name or getattr(f, "__name__", "function"), overwrite=overwrite)


def write_hooked(f, *args, logdir: str | os.PathLike, name: str | None = None, overwrite: bool = False,
                 **kwargs) -> Written:
    """Write the runs of each function body of ``f`` the hook saw (``explain_hooked`` finds the same ones)
    under ``logdir/<name>``, or ``logdir/<name>/<function>`` when there are several."""
    from tfxla_plugin.hook import lookup

    _check_logdir(logdir)
    graphs = [g for g in lookup.require(f, *args, **kwargs) if g.analysis is not None]
    if not graphs:
        raise LookupError("tfxla_plugin.tensorboard.write_hooked: the hook recorded no clustering for this function "
                          "(it failed on it or could not read it; see tfxla_plugin.explain_hooked)")
    if not name:  # a tf.function's or a Keras model's name (a ConcreteFunction's is bytes)
        name = getattr(f, "__name__", None) or getattr(f, "name", None) or "function"
        name = name.decode() if isinstance(name, bytes) else str(name)
    runs: dict[str, str] = {}
    for g in graphs:
        if len(graphs) == 1:
            runs.update(write_compiled_graph(g, logdir, name, overwrite=overwrite).runs)
            continue
        written = write_compiled_graph(g, Path(logdir) / run_name(name), g.function, overwrite=overwrite)
        runs.update({f"{run_name(name)}/{run}": path for run, path in written.runs.items()})
    return Written(str(logdir), runs)


__all__ = ["ATTR_LIMIT", "CLUSTER_TEXT_TAGS", "HLO_RUN", "ORIGINAL_RUN", "REWRITTEN_RUN", "Written", "launch_info",
           "run_name", "unfence", "write", "write_compiled_graph", "write_graph_def", "write_hooked"]
