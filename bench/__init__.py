"""Benchmarks (not tests): ours vs TF graph mode vs TF XLA, medians from one process run."""
