"""What the graph-optimizer plugin calls: ``optimize(graph, preserve, name) -> bytes | None``.

The C++ plugin (``graph_optimizer.cc``) calls ``optimize`` under the GIL for every CPU graph Grappler
optimizes, with the serialized GraphDef, the names of the nodes Grappler must preserve and Grappler's
item id (for a function body: the function's name in TF's runtime, ``__inference_f_12``). ``None``
means "run the graph as it is" (the plugin then returns the input unchanged), bytes are the
rewritten graph. What was decided is kept under the function's name (``state.HookedGraph``:
``tfxla_plugin.explain_hooked``, TensorBoard); a ``jit_compile=True`` function called eagerly arrives
under its twin's name (``eager_jit``) and is kept under its own. This function never raises:

- switch off, or a graph seen while the hook is already at work on this thread (compiling may run
  TensorFlow, whose functions come back here): ``None``, silently, nothing counted;
- Grappler runs its optimizers about twice per graph (meta-optimizer iterations) and the second
  time hands back what the first returned, possibly with its nodes reordered. Every decision is
  therefore remembered under an order-independent digest of the graph (``graph_digest``), and a graph
  whose launch nodes all run kernels we compiled is ours (TF's optimizers may have touched it again):
  a graph is worked on, counted and logged once;
- a graph whose loops TF lowered (``Merge``/``Switch`` frames) is worked on as the function's own body in
  functional form, with its library (``functional``; docs/hook.md, "Loops"); what comes back names only
  functions TF has for it (``functional.runnable``), else the graph is left alone;
- a graph left alone for a reason (nothing to compile, no static shapes, already compiled): counted
  in ``stats().left_alone``, no log line; under must-compile an unsupported node is one ERROR line;
- any exception while rewriting: the graph runs as TensorFlow would, after one WARNING naming the
  cause on the ``tfxla_plugin`` logger;
- a rewritten graph: one INFO line (clusters, coverage, seconds, calls taken from XLA);
- what a returned graph keeps in TF, and a graph left alone, is fused by TF's remapper (``remap``: TF's
  own is off while the switch is on), so it runs as TF would run it without the hook.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from typing import Sequence

from graph_passes.rewrite import LAUNCH_OP
from tfxla_plugin.hook import eager_jit, functional, remap, state
from tfxla_plugin.hook.state import HookedGraph

log = logging.getLogger("tfxla_plugin")
MEMO_SIZE = 4096  # graphs whose decision is remembered (LRU) ...
MEMO_BYTES = 64 << 20  # ... and at most this many bytes of rewritten graphs with them

_local = threading.local()
UNKNOWN_FUNCTIONS = "loops left in TF would call functions TF does not have"
LEFT_IN_TF = {"dynamic shape": "dynamic shapes"}  # excluded-node reason prefix -> stats().left_in_tf key

_memo: OrderedDict[str, tuple[bytes | None, HookedGraph | None]] = OrderedDict()
_memo_bytes = 0
_kernels: set[str] = set()  # sha256 of every kernel a rewritten graph runs


def optimize(graph: bytes, preserve: Sequence[str], name: str = "") -> bytes | None:
    if not state.SWITCH.on or getattr(_local, "busy", False):
        return None
    _local.busy = True
    try:
        return _optimize(graph, list(preserve), name)
    except BaseException as e:  # noqa: BLE001  (never into TF: it would run the original graph anyway)
        log.warning("tfxla hook: a graph is left to TensorFlow: the hook failed: %s: %s", type(e).__name__, e)
        return None
    finally:
        _local.busy = False


def at_work() -> bool:
    """Whether this thread is inside ``optimize`` (the compiler's own TF calls come back here)."""
    return getattr(_local, "busy", False)


def graph_digest(graph_def) -> str:
    """sha256 of the graph's nodes as a set (Grappler reorders them between iterations) and versions."""
    h = hashlib.sha256(graph_def.versions.SerializeToString(deterministic=True))
    for node in sorted(n.SerializeToString(deterministic=True) for n in graph_def.node):
        h.update(len(node).to_bytes(8, "little") + node)
    return h.hexdigest()


def describe(graph_def) -> str:
    """A graph by its size and outputs (a function body has no name)."""
    outs = [n.input[0] for n in graph_def.node if n.op == "_Retval" and n.input]
    shown = ", ".join(outs[:3]) + (", ..." if len(outs) > 3 else "")
    return f"a graph of {len(graph_def.node)} nodes" + (f" (returning {shown})" if outs else "")


def _ours(graph_def) -> bool:
    """Whether the graph's launch nodes (if any) all run kernels this hook compiled."""
    hashes = [n.attr["kernel_hash"].s.decode() for n in graph_def.node if n.op == LAUNCH_OP]
    return bool(hashes) and all(h in _kernels for h in hashes)


def _remember(digest: str, result: bytes | None, hooked: HookedGraph | None = None) -> None:
    global _memo_bytes
    with state.LOCK:
        _memo_bytes += len(result or b"") - len(_memo.get(digest, (None,))[0] or b"")
        _memo[digest] = (result, hooked)
        _memo.move_to_end(digest)
        while len(_memo) > MEMO_SIZE or _memo_bytes > MEMO_BYTES:
            _memo_bytes -= len(_memo.popitem(last=False)[1][0] or b"")


def _optimize(graph: bytes, preserve: list[str], name: str) -> bytes | None:
    import tensorflow as tf

    from tfxla_plugin.flags import Flags

    function, jit_requested = eager_jit.original_name(name)
    graph_def = tf.compat.v1.GraphDef.FromString(graph)
    digest = graph_digest(graph_def)
    with state.LOCK:
        if digest in _memo:
            _memo.move_to_end(digest)
            out, hooked = _memo[digest]
            if hooked is not None:  # the same body under another name (a retrace) shares the record
                state.keep(function, hooked)
            return out
        if _ours(graph_def):
            return None  # what we returned, after TF's other optimizers had another go at it
        state.stats().graphs_seen += 1
        must_compile = state.SWITCH.must_compile
    _remember(digest, None)  # whatever happens below, this graph is decided (and warned about) once
    start = time.perf_counter()
    try:
        result = _rewrite(graph_def, name, preserve, Flags.from_env(), must_compile=must_compile,
                          jit_requested=jit_requested)
    except Exception as e:
        seconds = time.perf_counter() - start
        failed = HookedGraph(function, f"failed: {type(e).__name__}", str(e), seconds=seconds)
        with state.LOCK:
            state.stats().left_alone[failed.decision] += 1
            state.stats().seconds_compiling += seconds
            state.keep(function, failed)
        _remember(digest, None, failed)
        log.warning("tfxla hook: %s is left to TensorFlow: %s: %s", describe(graph_def), type(e).__name__, e)
        return None
    left_alone_fused = _fuse_left_in_tf(result, graph_def, preserve)
    seconds = time.perf_counter() - start
    hooked = _hooked(function, result, seconds)
    with state.LOCK:
        s = state.stats()
        s.seconds_compiling += seconds
        s.xla_calls_taken += len(result.released)
        if result.graph_def is None:
            s.left_alone[result.reason] += 1
        elif result.clusters:
            s.graphs_rewritten += 1
            s.clusters_compiled += len(result.clusters)
            s.kernel_cache_hits += sum(c.cache_hit for c in result.clusters)
            s.left_in_tf.update(_left_in_tf(result.analysis))
        state.keep(function, hooked)
    if result.graph_def is None:
        if result.detail and must_compile:
            log.error("tfxla hook (jit_compile=True): %s runs in TensorFlow, not compiled: %s", describe(graph_def),
                      result.detail)
        if left_alone_fused is None:
            _remember(digest, None, hooked)
            return None
        out = left_alone_fused.SerializeToString()  # the graph as TF would have run it, fused by its remapper
        _remember(digest, out, hooked)
        _remember(graph_digest(left_alone_fused), None)
        return out
    out = result.graph_def.SerializeToString()
    _remember(digest, out, hooked)
    _remember(graph_digest(result.graph_def), None)  # our own output, handed back next iteration
    with state.LOCK:
        _kernels.update(c.kernel_hash for c in result.clusters)
    _log_rewrite(graph_def, result, seconds)
    return out


def _rewrite(graph_def, name: str, preserve: list[str], flags, **options):
    """``body.rewrite_body`` of the graph to work on (``_functional``); where the functional body raises,
    of the graph as Grappler gave it (which raises in turn, or compiles what it can)."""
    from tfxla_plugin.hook.body import rewrite_body

    body, known = _functional(graph_def, name)
    if known is not None:
        try:
            result = rewrite_body(body, preserve, flags, **options)
        except Exception as e:  # noqa: BLE001  (the lowered graph may still compile)
            log.debug("tfxla hook: %s: the functional body failed: %s: %s", describe(graph_def), type(e).__name__, e)
        else:
            return result if result.graph_def is None else _runnable(result, known)
    return rewrite_body(graph_def, preserve, flags, **options)


def _functional(graph_def, name: str) -> tuple[object, dict | None]:
    """(graph to work on, its library or None): ``graph_def`` and None, or where TF lowered its loops
    (``Merge``/``Switch`` frames), the function's own body in functional form and the library TF runs it
    with (``functional``). A function TF does not know by ``name`` keeps the graph as Grappler gave it."""
    if not functional.lowered(graph_def):
        return graph_def, None
    try:
        body = functional.functional_body(graph_def, name)
    except Exception as e:  # noqa: BLE001  (the lowered graph is still a valid one to work on)
        log.debug("tfxla hook: %s: no functional body for %r: %s: %s", describe(graph_def), name, type(e).__name__, e)
        return graph_def, None
    if body is None:
        return graph_def, None
    return body, {f.signature.name: f for f in body.library.function}


def _fuse_left_in_tf(result, graph_def, preserve: list[str]):
    """TF's remapper on what stays in TF (``remap``; its own is off while the switch is on): a rewritten
    graph's nodes outside its launches, in place in ``result`` (so explain and TensorBoard show what TF
    runs); for a graph left alone, the fused copy of ``graph_def`` to return instead (None: nothing fused)."""
    if result.graph_def is None:
        return remap.fused(graph_def, preserve)
    graph = remap.fused(result.graph_def, preserve)
    if graph is not None:
        result.graph_def = graph
        if result.rewritten is not None:
            result.rewritten = dataclasses.replace(result.rewritten, graph_def=graph)
    return None


def _runnable(result, known: dict):
    """``result`` with a graph naming only functions TF has for it (``functional.runnable``), or left alone."""
    from tfxla_plugin.hook.body import BodyResult

    graph = functional.runnable(result.graph_def, known)
    if graph is None:
        return BodyResult(None, UNKNOWN_FUNCTIONS, "", result.analysis)
    result.graph_def = graph
    if result.rewritten is not None:
        result.rewritten = dataclasses.replace(result.rewritten, graph_def=graph)  # what explain/TensorBoard show
    return result


def _hooked(function: str, result, seconds: float) -> HookedGraph:
    """The record of ``rewrite_body``'s ``result`` for the function body called ``function``."""
    if result.graph_def is None:
        decision = result.reason
    else:
        decision = state.REWRITTEN if result.clusters else state.RELEASED
    return HookedGraph(function, decision, result.detail, result.analysis, tuple(result.clusters), result.rewritten,
                       tuple(result.released), seconds)


def _left_in_tf(analysis) -> set[str]:
    """The ``LEFT_IN_TF`` reasons of the nodes a rewritten graph left in TF (each counted once per graph)."""
    return {label for reason in analysis.excluded.values() for prefix, label in LEFT_IN_TF.items()
            if reason.startswith(prefix)}


def _log_rewrite(graph_def, result, seconds: float) -> None:
    from graph_passes.pipeline import summary_json

    taken = f"; {len(result.released)} call(s) of jit_compile=True functions taken from XLA" if result.released else ""
    if not result.clusters:
        log.info("tfxla hook: %s: nothing compiled here%s", describe(graph_def), taken)
        return
    data = summary_json(result.analysis)
    hits = sum(c.cache_hit for c in result.clusters)
    log.info("tfxla hook: rewrote %s: %d cluster(s) compiled (%d kernel cache hits), %d of %d compute nodes "
             "clustered (%.1f%%), %.2f s%s", describe(graph_def), len(result.clusters), hits, data["nodes_clustered"],
             data["nodes_total"], data["percent_clustered"], seconds, taken)


__all__ = ["at_work", "describe", "graph_digest", "optimize"]
