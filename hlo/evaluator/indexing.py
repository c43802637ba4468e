"""Evaluator rules (indexing); filled in by its owner."""
