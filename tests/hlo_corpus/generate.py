"""Produce HLO text and reference results for the corpus cases.

All results are cached in-process (keyed by case name / stage), since TF
tracing and XLA compilation are slow.

* :func:`case_args`    -- the case's deterministic numpy inputs.
* :func:`hlo_text`     -- HLO text from real XLA, ``stage`` in :data:`STAGES`.
* :func:`tf_reference` -- outputs of running ``case.fn`` eagerly.
* :func:`xla_result`   -- outputs of the ``jit_compile=True`` tf.function.
"""

from __future__ import annotations

import functools
import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from .cases import CASES, CASES_BY_NAME, Case  # noqa: E402

__all__ = [
    "STAGES",
    "case_seed",
    "case_args",
    "hlo_text",
    "tf_reference",
    "xla_result",
    "CASES",
]

#: Stages accepted by ``experimental_get_compiler_ir``'s callable that we dump.
STAGES: tuple[str, ...] = ("hlo", "optimized_hlo")


def _lookup(case_or_name) -> Case:
    name = case_or_name if isinstance(case_or_name, str) else case_or_name.name
    return CASES_BY_NAME[name]


def case_seed(case) -> int:
    """Seed derived from the case name; stable across processes and runs."""
    return zlib.crc32(_lookup(case).name.encode("utf-8"))


@functools.lru_cache(maxsize=None)
def _case_args_cached(name: str) -> tuple[np.ndarray, ...]:
    case = CASES_BY_NAME[name]
    args = case.make_args(np.random.default_rng(case_seed(case)))
    out = []
    for a in args:
        a = np.asarray(a)
        a.setflags(write=False)  # shared via the cache: keep it immutable
        out.append(a)
    return tuple(out)


def case_args(case) -> tuple[np.ndarray, ...]:
    """The case's inputs (read-only numpy arrays; copy before mutating)."""
    return _case_args_cached(_lookup(case).name)


def _tf_args(name: str):
    return [tf.constant(a) for a in _case_args_cached(name)]


@functools.lru_cache(maxsize=None)
def _jit_function(name: str):
    return tf.function(CASES_BY_NAME[name].fn, jit_compile=True)


@functools.lru_cache(maxsize=None)
def _compiler_ir(name: str):
    return _jit_function(name).experimental_get_compiler_ir(*_tf_args(name))


@functools.lru_cache(maxsize=None)
def _hlo_text_cached(name: str, stage: str) -> str:
    return _compiler_ir(name)(stage=stage)


def hlo_text(case, stage: str = "hlo") -> str:
    """HLO module text for ``case`` at ``stage`` ("hlo" or "optimized_hlo")."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    return _hlo_text_cached(_lookup(case).name, stage)


def _to_numpy_list(result) -> list[np.ndarray]:
    return [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tf.nest.flatten(result)]


@functools.lru_cache(maxsize=None)
def _tf_reference_cached(name: str) -> tuple[np.ndarray, ...]:
    outs = _to_numpy_list(CASES_BY_NAME[name].fn(*_tf_args(name)))
    for o in outs:
        o.setflags(write=False)
    return tuple(outs)


def tf_reference(case) -> list[np.ndarray]:
    """Eager TF outputs of ``case.fn`` on ``case_args(case)``, flattened in order."""
    return list(_tf_reference_cached(_lookup(case).name))


@functools.lru_cache(maxsize=None)
def _xla_result_cached(name: str) -> tuple[np.ndarray, ...]:
    outs = _to_numpy_list(_jit_function(name)(*_tf_args(name)))
    for o in outs:
        o.setflags(write=False)
    return tuple(outs)


def xla_result(case) -> list[np.ndarray]:
    """Outputs of the XLA-compiled (jit_compile=True) function, flattened in order."""
    return list(_xla_result_cached(_lookup(case).name))
