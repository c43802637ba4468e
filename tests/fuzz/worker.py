"""One batch of fuzz graphs in one process (TF imported once): ``python -m tests.fuzz.worker``.

For each index it appends ``{"start": i}`` to the output file before running the graph and
``{"index": i, "status": ..., "detail": ..., "seconds": ...}`` after it, flushing both, so the
driver knows which graph was running when the process died.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--indices", required=True, help="comma-separated graph indices")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tests.fuzz.check import check  # TF is imported here, once per batch
    from tests.fuzz.generator import generate
    logging.getLogger("tfxla_plugin").setLevel(logging.WARNING)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    with open(a.out, "a", buffering=1) as out:
        for i in (int(v) for v in a.indices.split(",")):
            out.write(json.dumps({"start": i}) + "\n")
            t0 = time.perf_counter()
            try:
                o = check(generate(a.seed, i))
                status, detail = o.status, o.detail
            except Exception as e:  # noqa: BLE001 - a failure of the harness itself, still counted
                status, detail = "unclear", f"harness: {type(e).__name__}: {e}"
            out.write(json.dumps({"index": i, "status": status, "detail": detail,
                                  "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
