"""Compile (or load) every kernel now: ``python -m hpbroker.kernels.compile``.

Importing a kernel module compiles its declared signatures, or loads them from
numba's cache (see ``jit``); this command does just that, up front.  Run at
install time (``scripts/ensure-venv.sh`` runs it right after ``pip install``)
it leaves the machine code in the package's ``__pycache__`` while that is
still writable, so a read-only install starts without compiling: a service
whose cache is elsewhere (``NUMBA_CACHE_DIR``) copies these files there on its
first start.  With ``NUMBA_CACHE_DIR`` set, this fills that directory instead.

It prints a line per kernel (signatures, how many came from the cache, how
many were compiled, where they are cached) and exits 1 when a kernel lacks
one of its declared signatures.
"""

import sys


def load() -> dict:
    """Every kernel by name, once each has all its declared signatures
    (compiled or loaded on import) and can compile no others."""
    import hpbroker.kernels  # noqa: F401  (imports every kernel module)
    from hpbroker.kernels.jit import KERNELS, missing_signatures

    missing = {name: sigs for name, sigs in missing_signatures().items() if sigs}
    if missing:
        raise RuntimeError(f"kernels without their declared signatures: {missing}")
    return dict(KERNELS)


def main() -> int:
    try:
        kernels = load()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    for name, dispatcher in sorted(kernels.items()):
        stats = dispatcher.stats
        print(f"{name:28} {len(dispatcher.signatures)} signature(s), {sum(stats.cache_hits.values())} loaded, "
              f"{sum(stats.cache_misses.values())} compiled, cache {stats.cache_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
