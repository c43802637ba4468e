"""Evaluator rules (reductions); filled in by its owner."""
