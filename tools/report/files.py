"""Files a report writes: created new, never over an existing file or through a symlink, in a folder made
where missing; each failure a ParameterError that names the path."""

from __future__ import annotations

import os
from pathlib import Path

from tools.errors import ParameterError

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def exists_already(path: Path) -> ParameterError:
    return ParameterError(f"{path} exists already; a report never replaces a file",
                          hint="give another --out name, or leave --out out for a new file in the reports folder")


def write_new(path: Path, data: str | bytes) -> None:
    """Create ``path`` with ``data`` (text, or bytes such as a PNG); never over an existing file and never through
    a symlink at that name."""
    try:
        fd = os.open(path, NEW_FILE, 0o644)
    except FileExistsError:
        raise exists_already(path) from None
    except OSError as exc:
        raise ParameterError(f"cannot create {path}: {exc.strerror or exc}",
                             hint="give a folder you can write to") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as exc:
        path.unlink(missing_ok=True)  # a cut-off file would pass for a whole one
        raise ParameterError(f"cannot write {path}: {exc.strerror or exc}",
                             hint="give a folder you can write to, with room for the report") from None


def make_folder(folder: Path) -> None:
    """Create ``folder`` and its parents where missing; a ParameterError naming it when that cannot be done."""
    if folder.is_dir():
        return
    if folder.exists():
        raise ParameterError(f"{folder} is a file, not a folder", hint="give --out a folder you can write to")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ParameterError(f"cannot create the folder {folder}: {exc.strerror or exc}",
                             hint="give --out a folder you can write to") from None
