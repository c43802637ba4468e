"""Rule tables filled on first use: each registry (lowerings, shape rules, evaluator rules) imports the
module that registers its rules once, the first time a rule is looked up, not at import time.

Clusters compile on several threads: the first caller imports the rules while the others wait. The
lock is re-entrant because importing the rules may call back into the registry on the same thread.
"""

from __future__ import annotations

import importlib
import threading


class RuleModule:
    """Calling it imports ``module`` (which registers its rules) once; later calls return at once."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._loaded = False
        self._lock = threading.RLock()

    def __call__(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                importlib.import_module(self.module)
                self._loaded = True
