"""``hpbroker dump-log``: print segment and index files the way kafka-dump-log does.

One line per batch (``--records`` adds one per record); a corrupt batch or an
index entry that disagrees with its log is reported in place, and the exit
status is 1 when anything was corrupt.
"""

import mmap
import os
import sys

import numpy as np

from hpbroker.kernels import batch_scan, layout, scan_batches
from hpbroker.kernels.batch_scan import STOP_END
from hpbroker.records import CorruptRecordError, batch as batch_format, control, legacy
from hpbroker.storage import filenames
from hpbroker.storage.offset_index import OffsetIndex
from hpbroker.storage.time_index import TimeIndex

_STOP_REASONS = {
    batch_scan.STOP_TORN: "incomplete batch at the end of the file (torn write)",
    batch_scan.STOP_BAD_LENGTH: "impossible batch length",
    batch_scan.STOP_BAD_MAGIC: "unknown magic byte",
    batch_scan.STOP_BAD_CRC: "CRC mismatch",
}


def add_parser(sub) -> None:
    parser = sub.add_parser("dump-log",
                            help="print the batches of .log files and the entries of .index/.timeindex files")
    parser.add_argument("files", nargs="+", metavar="FILE", help=".log, .index or .timeindex files")
    parser.add_argument("--records", action="store_true", help="print every record: key, value and headers")
    parser.add_argument("--index", action="store_true", help="with a .log, also dump its .index and .timeindex")
    parser.set_defaults(run=run)


def run(args) -> int:
    corrupt = False
    for path in args.files:
        if not os.path.isfile(path):
            print(f"hpbroker dump-log: {path}: no such file", file=sys.stderr)
            return 2
        paths = [path]
        if args.index and path.endswith(filenames.LOG_SUFFIX):
            stem = path[: -len(filenames.LOG_SUFFIX)]
            paths += [p for p in (stem + filenames.INDEX_SUFFIX, stem + filenames.TIME_INDEX_SUFFIX)
                      if os.path.exists(p)]
        for each in paths:
            print(f"Dumping {each}")
            if each.endswith(filenames.LOG_SUFFIX):
                corrupt |= dump_segment(each, args.records)
            elif each.endswith(filenames.INDEX_SUFFIX):
                corrupt |= dump_offset_index(each)
            elif each.endswith(filenames.TIME_INDEX_SUFFIX):
                corrupt |= dump_time_index(each)
            else:
                print(f"hpbroker dump-log: {each}: not a .log, .index or .timeindex file", file=sys.stderr)
                return 2
    return 1 if corrupt else 0


def _map(path: str):
    size = os.path.getsize(path)
    if size == 0:
        return np.zeros(0, np.uint8)
    with open(path, "rb") as f:
        return np.frombuffer(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), np.uint8)


def _base_offset(path: str) -> int:
    try:
        return filenames.base_offset_of(path)
    except ValueError:
        return 0


def dump_segment(path: str, with_records: bool) -> bool:
    view = _map(path)
    print(f"Log starting offset: {_base_offset(path)}")
    scan = scan_batches(view, stop_at_invalid=False)
    corrupt = False
    for i in range(len(scan.position)):
        pos, size = int(scan.position[i]), int(scan.size[i])
        data = view[pos : pos + size].tobytes()
        ok = bool(scan.crc_ok[i])
        corrupt |= not ok
        if scan.magic[i] == 2:
            header = batch_format.read_header(data, 0)
            print(_batch_line(header, pos, ok))
            if with_records:
                corrupt |= _print_v2_records(data, ok)
        else:
            print(_legacy_line(scan, i, data, ok))
            if with_records:
                corrupt |= _print_legacy_records(data)
    if scan.stop != STOP_END:
        corrupt = True
        print(f"Found corruption at position {scan.valid_end if scan.valid_end >= 0 else len(view)}: "
              f"{_stop_reason(scan.stop)}; {len(view) - _end_of_reported(scan)} bytes from there cannot be read")
    return corrupt


def _end_of_reported(scan) -> int:
    if len(scan.position) == 0:
        return 0
    return int(scan.position[-1] + scan.size[-1])


def _stop_reason(stop: int) -> str:
    return _STOP_REASONS.get(stop, f"scan stopped (code {stop})")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(h, position: int, ok: bool) -> str:
    last_sequence = -1 if h.base_sequence < 0 else (h.base_sequence + h.last_offset_delta) & 0x7FFFFFFF
    horizon = f"OptionalLong[{h.base_timestamp}]" if h.has_delete_horizon else "OptionalLong.empty"
    time_name = "LogAppendTime" if h.timestamp_type == 1 else "CreateTime"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} deleteHorizonMs: {horizon} "
        f"position: {position} {time_name}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: "
        f"{layout.CODEC_NAMES[h.compression] if h.compression < len(layout.CODEC_NAMES) else h.compression} "
        f"crc: {h.crc} isvalid: {_bool(ok)}"
    )


def _legacy_line(scan, i: int, data: bytes, ok: bool) -> str:
    attributes = int(scan.attributes[i])
    codec = attributes & layout.LEGACY_COMPRESSION_MASK
    crc = int.from_bytes(data[layout.LEGACY_CRC : layout.LEGACY_CRC + 4], "big")
    time_part = f" CreateTime: {int(scan.max_timestamp[i])}" if scan.magic[i] == 1 else ""
    return (
        f"offset: {int(scan.last_offset[i])} position: {int(scan.position[i])}{time_part} size: {int(scan.size[i])} "
        f"magic: {int(scan.magic[i])} compresscodec: {layout.CODEC_NAMES[codec] if codec < 5 else codec} "
        f"crc: {crc} isvalid: {_bool(ok)}"
    )


def _print_v2_records(data: bytes, ok: bool) -> bool:
    try:
        batch = batch_format.decode_batch(data, 0, verify_crc=False)
    except (CorruptRecordError, ValueError) as exc:
        print(f"| cannot decode the records: {exc}")
        return True
    h = batch.header
    time_name = "LogAppendTime" if h.timestamp_type == 1 else "CreateTime"
    for i, record in enumerate(batch.records):
        sequence = -1 if h.base_sequence < 0 else (h.base_sequence + record.offset - h.base_offset) & 0x7FFFFFFF
        line = (f"| offset: {record.offset} {time_name}: {record.timestamp} keySize: {_size(record.key)} "
                f"valueSize: {_size(record.value)} sequence: {sequence}")
        if h.is_control:
            marker = control.parse_control_record(record)
            line += f" endTxnMarker: {marker.kind_name} coordinatorEpoch: {marker.coordinator_epoch}"
        else:
            keys = ",".join(_printable(hd.key) for hd in record.headers)
            line += f" headerKeys: [{keys}] key: {_printable(record.key)} payload: {_printable(record.value)}"
        print(line)
    return False


def _print_legacy_records(data: bytes) -> bool:
    try:
        records = legacy.decode_message_set(data)
    except (CorruptRecordError, ValueError) as exc:
        print(f"| cannot decode the messages: {exc}")
        return True
    for record in records:
        print(f"| offset: {record.offset} CreateTime: {record.timestamp} keySize: {_size(record.key)} "
              f"valueSize: {_size(record.value)} key: {_printable(record.key)} payload: {_printable(record.value)}")
    return False


def _size(value) -> int:
    return -1 if value is None else len(value)


def _printable(value) -> str:
    if value is None:
        return "null"
    try:
        text = value.decode("utf-8")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return repr(bytes(value))[2:-1]


def dump_offset_index(path: str) -> bool:
    index = OffsetIndex(path, _base_offset(path), os.path.getsize(path) + 8, read_only=True)
    log_path = path[: -len(filenames.INDEX_SUFFIX)] + filenames.LOG_SUFFIX
    view = _map(log_path) if os.path.exists(log_path) else None
    corrupt = False
    try:
        for key, position in zip(index.keys().tolist(), index.values().tolist()):
            offset = index.base_offset + key
            print(f"offset: {offset} position: {position}")
            if view is not None:
                found = scan_batches(view, position, len(view), verify_crc=False, max_batches=1)
                if len(found.position) == 0 or int(found.last_offset[0]) != offset:
                    got = int(found.last_offset[0]) if len(found.position) else "nothing"
                    print(f"Index mismatch: the batch at position {position} of {os.path.basename(log_path)} "
                          f"ends at offset {got}, not {offset}")
                    corrupt = True
        corrupt |= _trailing_bytes(path, len(index), OffsetIndex.DTYPE.itemsize)
    finally:
        index.close()
    return corrupt


def dump_time_index(path: str) -> bool:
    index = TimeIndex(path, _base_offset(path), os.path.getsize(path) + 12, read_only=True)
    try:
        for timestamp, key in zip(index.keys().tolist(), index.values().tolist()):
            print(f"timestamp: {timestamp} offset: {index.base_offset + key}")
        return _trailing_bytes(path, len(index), TimeIndex.DTYPE.itemsize)
    finally:
        index.close()


def _trailing_bytes(path: str, entries: int, entry_size: int) -> bool:
    extra = os.path.getsize(path) - entries * entry_size
    if extra:
        print(f"Found {extra} bytes after the last valid entry (zero padding or a torn write)")
    return extra > 0
