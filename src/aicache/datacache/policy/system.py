"""The data-cache system interface, as the data cache's modules import it.

:class:`DataCacheSystem` is defined in :mod:`aicache.policies.system`, a layer below both
this package and the adaptive controller that implements it.
"""

from aicache.policies.system import DataCacheSystem as DataCacheSystem

__all__ = ["DataCacheSystem"]
