"""How the kernels are compiled: declared signatures, normalized arguments, one cache.

Every jitted entry point is ``@kernel(signature, ...)``: numba compiles (or
loads from its cache) exactly those signatures when the module is imported,
then refuses to compile anything else, so a worker process never stalls in
the compiler.  A call with other types either converts safely to a declared
signature or raises ``TypeError``.  The signatures take:

* byte buffers as ``BYTES``, read-only C-contiguous uint8: an mmap'd segment
  is read-only, a produce buffer is not, and numba passes a writable array to
  a read-only parameter as it is (a safe conversion: no copy, no compile);
* per-batch inputs as ``INT64S``, read-only C-contiguous aligned int64
  (writable ones pass likewise; ``int64s`` makes anything else so);
* outputs the kernels fill as ``INT64S_OUT``, writable int64;
* scalars as int64, flags as ``boolean``.

Helpers marked ``inline="always"`` stay lazy: numba inlines them into their
callers' IR and never compiles them on their own.

Where the cache lives (numba's own order, plus two steps of ours):

1. ``NUMBA_CACHE_DIR`` when set and writable (the systemd units set it);
2. the package's ``__pycache__`` when writable: ``python -m
   hpbroker.kernels.compile`` fills it at install time;
3. numba's user-wide directory (``~/.cache/numba``) when writable;
4. ours: when none of those is writable numba would fail at import, so a
   private per-user directory under the temp dir is used instead.

With the cache somewhere else than ``__pycache__`` (a read-only install whose
service sets ``NUMBA_CACHE_DIR``), the files compiled there at install time
are copied over first when they are newer than the ones in use, so the first
start of a read-only install loads instead of compiling.
"""

import hashlib
import os
import shutil
import stat
import sys
import tempfile

import numpy as np
from numba import config, njit, types
from numba.misc.appdirs import AppDirs

BYTES = types.Array(types.uint8, 1, "C", readonly=True)
INT64S = types.Array(types.int64, 1, "C", readonly=True)
INT64S_OUT = types.Array(types.int64, 1, "C")

# Every ``@kernel`` by "module.function", and the signatures it declared:
# what the warm-up and the tests check.
KERNELS = {}
DECLARED = {}

IN_TREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")


def int64s(values) -> np.ndarray:
    """``values`` as a C-contiguous aligned int64 array, copied only when it is not one."""
    array = np.ascontiguousarray(values, np.int64)
    return array if array.flags.aligned else array.copy()


def kernel(*signatures):
    """``njit`` for exactly ``signatures`` (tuples of argument types), cached, without the GIL."""
    def compile_eagerly(function):
        _seed_from_install(function.__code__.co_filename)
        dispatcher = njit(list(signatures), cache=True, nogil=True)(function)
        name = f"{function.__module__.rsplit('.', 1)[-1]}.{function.__name__}"
        KERNELS[name] = dispatcher
        DECLARED[name] = tuple(signatures)
        return dispatcher
    return compile_eagerly


def missing_signatures() -> dict:
    """Per kernel, the declared signatures it has no machine code for (normally none)."""
    return {name: [sig for sig in DECLARED[name] if tuple(sig) not in dispatcher.signatures]
            for name, dispatcher in KERNELS.items()}


# --- where the cache lives ---------------------------------------------------

def _writable_dir(path: str) -> bool:
    """numba's own test of a cache directory: create it, write a file in it."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _private_temp_dir() -> str:
    """A per-user directory under the temp dir that only this user can write:
    cached machine code is loaded as is, so nobody else may plant it."""
    path = os.path.join(tempfile.gettempdir(), f"hpbroker-numba-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="hpbroker-numba-")
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return tempfile.mkdtemp(prefix="hpbroker-numba-")
    return path


def _cache_root() -> str | None:
    """The directory numba will put a cache subdirectory in, or None for ``__pycache__`` itself."""
    # numba.core.config sets its settings (CACHE_DIR ...) at run time, from the environment
    configured = config.CACHE_DIR  # pyright: ignore[reportAttributeAccessIssue]
    if configured and _writable_dir(configured):
        return configured
    if _writable_dir(IN_TREE):
        return None
    user_wide = AppDirs(appname="numba", appauthor=False).user_cache_dir
    if _writable_dir(user_wide):
        return user_wide
    fallback = _private_temp_dir()
    # Both: numba rereads its config from the environment when a NUMBA_ variable changes.
    os.environ["NUMBA_CACHE_DIR"] = config.CACHE_DIR = fallback  # pyright: ignore[reportAttributeAccessIssue]
    return fallback


CACHE_ROOT = _cache_root()


def cache_dir(source_file: str) -> str:
    """Where numba caches the kernels of ``source_file`` (as numba's locators name it)."""
    if CACHE_ROOT is None:
        return IN_TREE
    source_dir = os.path.dirname(os.path.abspath(source_file))
    hashed = hashlib.sha1(source_dir.encode()).hexdigest()
    return os.path.join(CACHE_ROOT, f"{os.path.basename(source_dir)}_{hashed}")


_seeded = set()


def _seed_from_install(source_file: str) -> None:
    """Copy the install-time cache files of ``source_file``'s module into the
    cache in use, when they are newer there: data files first, index last, each
    through a temporary name, so a concurrent reader sees old or new, whole."""
    if CACHE_ROOT is None or source_file in _seeded or not os.path.isdir(IN_TREE):
        return
    _seeded.add(source_file)
    target = cache_dir(source_file)
    module = os.path.splitext(os.path.basename(source_file))[0]
    tag = f".py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    for name in os.listdir(IN_TREE):
        if not (name.startswith(module + ".") and name.endswith(tag + ".nbi")):
            continue
        index = os.path.join(IN_TREE, name)
        try:
            if os.path.getmtime(index) <= os.path.getmtime(os.path.join(target, name)):
                continue
        except FileNotFoundError:
            pass
        stem = name[: -len(".nbi")]
        data = [n for n in os.listdir(IN_TREE) if n.startswith(stem + ".") and n.endswith(".nbc")]
        try:
            os.makedirs(target, exist_ok=True)
            for n in data + [name]:
                _copy(os.path.join(IN_TREE, n), os.path.join(target, n))
        except OSError:
            return  # numba compiles what it cannot load


def _copy(source: str, target: str) -> None:
    temporary = f"{target}.seed.{os.getpid()}"
    try:
        shutil.copy2(source, temporary)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
