"""Harnesses for kernels skel has never seen: specs inferred from a launcher's code (``infer``) or
captured from the user's own runs (``capture``), written as readable ``spec.py`` files the gate loads
like a hand-written one. Nothing here imports or runs the user's kernel file: inference reads it."""
