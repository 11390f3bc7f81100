"""Anonymous shared mappings, inherited by fork."""

import mmap


def anonymous(size: int) -> mmap.mmap:
    """``size`` zeroed bytes shared with every process forked after this call."""
    return mmap.mmap(-1, max(size, mmap.PAGESIZE), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS,
                     prot=mmap.PROT_READ | mmap.PROT_WRITE)
