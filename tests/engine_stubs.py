"""Stand-ins that ``bench.engine_process`` children load by ``module:attribute`` in tests/test_function_bench.py:
``TINY`` (a row: x * 2 on two floats) and ``SPINNING`` (an engine whose "thread pool" spins forever, as
OpenVINO's and ONNX Runtime's pools went on spinning after their rounds; its outputs: x * 2 and the id of
the process that converted it)."""

from __future__ import annotations

import os
import threading

import numpy as np
import tensorflow as tf

from bench.engines import Engine, Prepared
from bench.models import Case, Row


def _spin() -> None:
    while True:
        pass


def _prepare_spinning(case: Case, graph) -> Prepared:
    threading.Thread(target=_spin, daemon=True).start()
    outputs = [np.asarray(graph(*case.args)), np.array(os.getpid())]  # and where it was converted
    return Prepared(lambda: None, lambda: outputs, 0.25)


TINY = Row("tiny x*2", lambda: Case(lambda x: x * 2.0, [tf.constant([1.0, 2.0])]))
SPINNING = Engine("spinning", "Spinning", ("numpy",), _prepare_spinning)
