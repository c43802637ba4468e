"""Test-time corpus of HLO modules produced by real XLA (via TensorFlow).

* :mod:`tests.hlo_corpus.cases`    -- the ``CASES`` list (small TF functions + inputs).
* :mod:`tests.hlo_corpus.generate` -- ``hlo_text(case, stage)``, ``tf_reference(case)``,
  ``case_args(case)`` (cached in-process).
* :mod:`tests.hlo_corpus.dump`     -- ``python -m tests.hlo_corpus.dump OUTDIR`` writes
  every module to disk plus an opcode/attribute ``SUMMARY.txt``.

Importing this package does not import TensorFlow; it only quiets TF's C++
logging for whatever imports TF later.
"""

import os as _os

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
