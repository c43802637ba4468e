"""GPU checks for the CUDA backend: shared cases, the corpus snapshot, and the check script (run.sh)."""
