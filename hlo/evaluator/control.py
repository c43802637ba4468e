"""Evaluator rules (control); filled in by its owner."""
