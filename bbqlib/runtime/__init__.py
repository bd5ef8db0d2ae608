"""The library's runtime knobs: how many threads its kernels use (:mod:`.threads`)."""
