"""What skeleton rules share to evaluate their conditions on one kernel: ``base`` (``Ctx``: the
profile, its source and the lookups over them, cached per kernel; ``Check``, ``Hit``, ``yes``/``no``),
``helpers`` and ``text``. The rules themselves live in the skeleton folders; running them over
kernels is ``skel.miner.detect``."""
