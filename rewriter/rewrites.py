"""Imports every rewrite module so that each registers itself (see base.register).

One line per skeleton; a new rewrite module adds its import here.
"""
from skel.rewriter import sk001_rsqrt  # noqa: F401
from skel.rewriter import sk002_merge_tiles  # noqa: F401
from skel.rewriter import sk003_hoist  # noqa: F401
from skel.rewriter import sk004_exp2  # noqa: F401
from skel.rewriter import sk005_launch  # noqa: F401
from skel.rewriter import sk006_eviction  # noqa: F401
from skel.rewriter import sk007_dot_precision  # noqa: F401
from skel.rewriter import sk008_do_not_specialize  # noqa: F401
from skel.rewriter import sk014_lazy_decay  # noqa: F401
from skel.rewriter import sk015_empty_output  # noqa: F401
