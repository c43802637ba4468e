"""A differential fuzzer: random small TF functions compiled by tfxla-plugin, compared with TF eager.

``generator`` draws a graph (a DAG of 1-8 ops from 1-3 inputs) deterministically from
``(seed, index)`` through the op table of ``ops``; every graph is a short Python source that
can be pasted into a test. ``check`` runs one graph eagerly and through
``tfxla_plugin.function(jit_compile=True)`` and ``"auto"`` and classifies the outcome with the
tolerance table; ``worker`` runs a batch of graphs in one process and ``__main__`` drives the
batches as subprocesses (``python -m tests.fuzz --graphs N --seed S --jobs J``). See README.md.
"""
