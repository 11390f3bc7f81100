"""Tables for people, JSON for scripts, progress bars for long work (rich)."""

import io
import json
import sys

from rich import box
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table


def _stdout_console(file=None) -> Console:
    # piped output must not be cut at rich's default 80 columns or coloured
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(file=file, width=100_000, no_color=True, highlight=False, soft_wrap=True)


def table(columns, rows, title: str | None = None) -> None:
    """Aligned columns without borders (easy on the eye and on awk); numbers right-aligned."""
    grid = Table(box=box.SIMPLE_HEAD if sys.stdout.isatty() else None, pad_edge=False, show_edge=False,
                 header_style="bold", title=title, title_justify="left")
    rows = [[_cell(v) for v in row] for row in rows]
    for i, name in enumerate(columns):
        numeric = all(_is_number(r[i]) for r in rows) and any(r[i] != "-" for r in rows)
        grid.add_column(name, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        grid.add_row(*row)
    if sys.stdout.isatty():
        _stdout_console().print(grid)
        return
    # rich pads the last column; piped lines should end at their last character
    buffer = io.StringIO()
    _stdout_console(buffer).print(grid)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


def line(text: str = "") -> None:
    _stdout_console().print(text, markup=False, soft_wrap=True)


def emit_json(value) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _is_number(text: str) -> bool:
    return text.lstrip("-").isdigit() or text == "-"


def byte_progress(total: int, description: str) -> Progress | None:
    """A bar on stderr for ``total`` bytes of work, or None when stderr is not a
    terminal (a bar in a log file is noise)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        return None
    progress = Progress(TextColumn(description), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=console, transient=True)
    progress.add_task(description, total=total)
    return progress


class Nothing:
    """A context manager that does nothing (where a bar or spinner is not wanted)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
