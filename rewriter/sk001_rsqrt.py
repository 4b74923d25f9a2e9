"""Import path kept for the probes under benchmarks/ until they move to experiments/ (issue 17,
item 6); nothing in skel imports it. The rule lives in skeletons/SK001-rsqrt-for-norm-division/rule.py."""
from skel.catalog.library import load_library

rewrite = load_library().get("SK001").rule.rewrite.raw  # the codemod alone, as the probes call it
