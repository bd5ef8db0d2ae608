"""The IVF index: a small facade (:mod:`.index`) over build, plan, scan and files modules."""

from .index import CLUSTER_SIZE_RANGE, MAX_VECTORS, IVFIndex

__all__ = ["IVFIndex", "CLUSTER_SIZE_RANGE", "MAX_VECTORS"]
