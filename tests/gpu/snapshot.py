"""Write ``tests/gpu/corpus.npz``: the XLA-dumped HLO corpus and its inputs, for GPU machines without TF.

    python -m tests.gpu.snapshot      # needs TensorFlow (traces every case of tests/hlo_corpus)

Arrays: ``names`` (case names), and per case ``j``: ``{j}_hlo`` and ``{j}_optimized_hlo`` (HLO text of
both stages), ``{j}_nargs`` and ``{j}_arg{k}`` (inputs). Rerun it when the corpus cases change.
"""

from __future__ import annotations

import numpy as np


def main() -> None:
    from tests.gpu.cases import CORPUS
    from tests.hlo_corpus.cases import CASES
    from tests.hlo_corpus.generate import case_args, hlo_text

    arrays: dict[str, np.ndarray] = {"names": np.array([c.name for c in CASES])}
    for j, case in enumerate(CASES):
        for stage in ("hlo", "optimized_hlo"):
            arrays[f"{j}_{stage}"] = np.array(hlo_text(case, stage))
        args = case_args(case)
        arrays[f"{j}_nargs"] = np.array(len(args))
        for k, a in enumerate(args):
            arrays[f"{j}_arg{k}"] = np.asarray(a)
    np.savez_compressed(CORPUS, **arrays)
    print(f"wrote {CORPUS} ({len(CASES)} cases)")


if __name__ == "__main__":
    main()
