"""The lake's manifest: which files are committed and which ledger ids they hold.

``<lake>/_ledger_manifest.json`` is the commit point of an export. A data file
counts once the manifest lists it; a file the manifest does not list is left
over from an export that died between writing it and committing it, and the
next export deletes it before writing anything. Readers that want exactly the
committed rows read the manifest's files (:func:`ledger.lake.duck.connect`,
:mod:`ledger.lake.spark` do); a plain ``*/*.parquet`` glob also works, since
an uncommitted file is complete and at most one exists at a time (below).

The ids are kept as merged closed ranges, so the manifest stays small however
many rows the lake holds; the ids *between* ranges (the holes) are those an
export has not seen: rolled-back ids, or rows that committed late on
PostgreSQL. Each export reads the holes again, so a late row is exported once
it reaches the analytics copy.

Ids say nothing of *which* ledger they came from: another ledger's rows 1..n
would look exported already. So each file also records the ``event_id`` of
its highest id (its *anchor*), and an export first checks that the ledger it
reads still holds those events under those ids (``ledger.lake.export``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from pyarrow import fs as pafs

MANIFEST_NAME: Final = "_ledger_manifest.json"
FORMAT: Final = "ledger-lake"
#: Bumped only when a column changes meaning or type; new columns are added
#: without a bump (Parquet readers merge schemas by name).
VERSION: Final = 1

IdRange = tuple[int, int]


class ManifestError(ValueError):
    """The target holds a manifest this version cannot read (another format or a newer one)."""


@dataclass(frozen=True, slots=True)
class LakeFile:
    """One committed Parquet file: its path under the lake root and what it holds."""

    path: str
    date: dt.date
    rows: int
    min_id: int
    max_id: int
    #: the ``event_id`` of the row ``max_id``; None in a manifest written before anchors
    anchor: str | None = None


@dataclass(frozen=True, slots=True)
class Manifest:
    files: tuple[LakeFile, ...] = ()
    exported: tuple[IdRange, ...] = ()
    updated_at: dt.datetime | None = field(default=None, compare=False)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def max_id(self) -> int:
        return self.exported[-1][1] if self.exported else 0

    def holes(self) -> list[IdRange]:
        """The id ranges below :attr:`max_id` that no committed file holds."""
        found: list[IdRange] = []
        expected = 1
        for lo, hi in self.exported:
            if lo > expected:
                found.append((expected, lo - 1))
            expected = hi + 1
        return found

    def committed(self, new: LakeFile, ids: Iterable[IdRange]) -> Manifest:
        return replace(
            self,
            files=(*self.files, new),
            exported=merge_ranges([*self.exported, *ids]),
            updated_at=dt.datetime.now(dt.UTC),
        )


def merge_ranges(ranges: Iterable[IdRange]) -> tuple[IdRange, ...]:
    """Sorted, non-overlapping closed ranges; adjacent ones (``hi + 1 == lo``) joined."""
    merged: list[IdRange] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def to_json(manifest: Manifest) -> str:
    return json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "updated_at": manifest.updated_at.isoformat() if manifest.updated_at else None,
            "rows": manifest.rows,
            "exported_ids": [list(r) for r in manifest.exported],
            "files": [
                {
                    "path": f.path,
                    "date": f.date.isoformat(),
                    "rows": f.rows,
                    "min_id": f.min_id,
                    "max_id": f.max_id,
                    "anchor": f.anchor,
                }
                for f in manifest.files
            ],
        },
        indent=1,
    )


def from_json(text: str) -> Manifest:
    data = json.loads(text)
    if data.get("format") != FORMAT or not isinstance(data.get("version"), int):
        raise ManifestError(f"{MANIFEST_NAME} is not a ledger lake manifest")
    if data["version"] > VERSION:
        raise ManifestError(
            f"{MANIFEST_NAME} has version {data['version']}; this ledger reads up to {VERSION}"
        )
    updated = data.get("updated_at")
    return Manifest(
        files=tuple(
            LakeFile(
                path=f["path"],
                date=dt.date.fromisoformat(f["date"]),
                rows=int(f["rows"]),
                min_id=int(f["min_id"]),
                max_id=int(f["max_id"]),
                anchor=f.get("anchor"),
            )
            for f in data["files"]
        ),
        exported=tuple((int(lo), int(hi)) for lo, hi in data["exported_ids"]),
        updated_at=dt.datetime.fromisoformat(updated) if updated else None,
    )


def read(filesystem: pafs.FileSystem, root: str) -> Manifest:
    """The manifest under ``root``; an empty one when the lake is new."""
    path = f"{root}/{MANIFEST_NAME}"
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return Manifest()
    with filesystem.open_input_stream(path) as stream:
        return from_json(stream.read().decode("utf-8"))


def write(filesystem: pafs.FileSystem, root: str, manifest: Manifest) -> None:
    """Replace the manifest: written aside, then moved over the old one (atomic locally;
    an object store's PUT replaces the object whole)."""
    path = f"{root}/{MANIFEST_NAME}"
    staging = f"{root}/_{MANIFEST_NAME}.tmp"
    with filesystem.open_output_stream(staging) as stream:
        stream.write(to_json(manifest).encode("utf-8"))
    filesystem.move(staging, path)
