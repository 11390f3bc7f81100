"""numba kernels over numpy views of segments; they import nothing else of hpbroker.

* ``layout``         byte layouts of batches and legacy messages, declared once
* ``crc``            CRC-32C (SSE4.2 instruction, 3 lanes; portable tables) and CRC-32
* ``batch_scan``     find and validate every batch of a byte range -> parallel arrays
* ``record_decode``  varint records of many batches -> columns
* ``index_plan``     which batches get ``.index`` / ``.timeindex`` entries
* ``key_table``      record-key hashes and the cleaner's key -> offset table
* ``jit``            how they compile: declared signatures, where the cache lives
* ``compile``        ``python -m hpbroker.kernels.compile``: every kernel, up front

Each jitted entry point is compiled (or loaded from numba's cache) for its
declared signatures on import and refuses to compile anything else, so no
worker ever stalls in the compiler; they work on C-contiguous uint8/int64
arrays, and the public wrappers check dtypes and name the columns they return.
"""

from hpbroker.kernels import layout
from hpbroker.kernels.batch_scan import BatchScan, scan_batches
from hpbroker.kernels.crc import crc32, crc32c
from hpbroker.kernels.index_plan import IndexPlan, plan_index_entries
from hpbroker.kernels.key_table import hash_keys
from hpbroker.kernels.record_decode import DecodedRecords, decode_records

__all__ = [
    "BatchScan", "DecodedRecords", "IndexPlan", "crc32", "crc32c", "decode_records", "hash_keys", "layout",
    "plan_index_entries", "scan_batches",
]
