"""Test-wide setup.

Triton's interpreter must be chosen before triton is imported anywhere, so it is
set here, at the top of the first module pytest loads. Tests never touch the
user's catalog: SKEL_CATALOG points into a per-session temporary folder.
"""
import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("SKEL_CATALOG", os.path.join(tempfile.mkdtemp(prefix="skel-test-"), "catalog.sqlite"))
