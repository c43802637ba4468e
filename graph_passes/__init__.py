"""graph_passes: Grappler-style passes over TensorFlow GraphDef protos (inline, mark, cluster, extract, rewrite)."""
