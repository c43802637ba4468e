"""The Grappler hook: every CPU graph TensorFlow runs, compiled with no code changes (docs/hook.md).

    tfxla_plugin.enable()              # or enable(jit_compile=True); TFXLA_FLAGS=--auto_jit=1 at import
    model.fit(x, y, epochs=3)          # Keras's train/predict functions, any tf.function, run TfxlaLaunch
    print(tfxla_plugin.stats())        # graphs seen / rewritten, clusters compiled, cache hits, why left alone
    tfxla_plugin.disable()             # or: with tfxla_plugin.enabled(): ...

``enable`` loads our pluggable graph optimizer (``native``: built once, loaded once per process: TF
aborts on a second CPU graph plugin, so it is never unloaded) and turns the switch on; Grappler then
hands each function body it instantiates to ``callback.optimize``, which rewrites it (``body``).
While the switch is on TF's remapper is off, so the hook sees ``MatMul``/``BiasAdd``/``Relu`` rather
than the ``_Fused*`` ops the remapper would make of them; the hook runs the remapper itself on what stays
in TF (``remap``; docs/hook.md, "Fused ops"). The switch acts
on graphs TF optimizes from then on: a function already instantiated keeps the graph it was given.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from tfxla_plugin.hook import eager_jit, native, state
from tfxla_plugin.hook.state import HookStats

JIT_MODES = ("auto", True)


def enable(jit_compile: bool | str = "auto") -> None:
    """Compile every CPU graph TF optimizes from now on. ``"auto"`` clusters what it can and leaves the
    rest in TF; ``True`` is must-compile: a graph with a node that cannot be compiled is not compiled at
    all, and one ERROR line lists the nodes (TF runs it; Grappler offers no way to fail the call)."""
    if jit_compile not in JIT_MODES:
        raise ValueError(f"tfxla_plugin.enable: jit_compile must be \"auto\" or True, got {jit_compile!r}")
    import tensorflow as tf

    native.load()
    eager_jit.install()
    with state.LOCK:
        if not state.SWITCH.on:
            state.SWITCH.remapping_before = tf.config.optimizer.get_experimental_options().get("remapping")
            tf.config.optimizer.set_experimental_options({"remapping": False})
        state.SWITCH.on = True
        state.SWITCH.must_compile = jit_compile is True


def disable() -> None:
    """Stop rewriting graphs (functions already rewritten keep their kernels); TF's remapper is restored."""
    import tensorflow as tf

    with state.LOCK:
        if not state.SWITCH.on:
            return
        state.SWITCH.on = False
        before = state.SWITCH.remapping_before
        tf.config.optimizer.set_experimental_options({"remapping": True if before is None else before})


def is_enabled() -> bool:
    return state.SWITCH.on


@contextlib.contextmanager
def enabled(jit_compile: bool | str = "auto") -> Iterator[None]:
    """``enable(jit_compile)`` for the body of a ``with``, then the switch as it was."""
    was_on, was_must = state.SWITCH.on, state.SWITCH.must_compile
    enable(jit_compile)
    try:
        yield
    finally:
        if was_on:
            enable(True if was_must else "auto")
        else:
            disable()


def stats() -> HookStats:
    """A copy of the hook's counters: graphs seen and rewritten, clusters compiled, kernel cache hits,
    seconds compiling, and graphs left alone by reason."""
    return state.snapshot()


def reset_stats() -> None:
    state.reset()


__all__ = ["HookStats", "disable", "enable", "enabled", "is_enabled", "reset_stats", "stats"]
