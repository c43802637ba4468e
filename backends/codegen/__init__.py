"""Backend-independent code generation helpers (indented buffers, name generation)."""
