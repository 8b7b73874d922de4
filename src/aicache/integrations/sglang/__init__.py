"""aicache inside SGLang's HiCache (tested with SGLang 0.5.23, installed ``--no-deps``).

* :class:`~aicache.integrations.sglang.storage.SariaHiCacheStorage` — a ``HiCacheStorage``
  backend for SGLang's ``dynamic`` loader: the real SSD slab store (checksums, crash
  recovery, a byte budget) with SARIA's E/R admission instead of writing every page.

The module imports SGLang; SGLang's loader imports it by module path.
"""

SGLANG_VERSION = "0.5.23"  #: the SGLang release this backend is tested with
