"""graph_passes: Grappler-style passes over TensorFlow GraphDef protos, one pass per module.

``inline`` (function calls) -> ``forward_variables`` (reads after writes) -> ``mark`` (compilable nodes,
with a reason for every other) -> ``cluster`` (cycle-free, deterministic) -> ``extract`` (subgraphs with
ordered inputs/outputs) -> ``rewrite`` (one launch node per cluster). ``pipeline`` drives them:
``analyze``/``analyze_function``, ``rewrite``, ``summary``/``summary_json``. Every pass returns a new
GraphDef and never modifies the one it was given.
"""
