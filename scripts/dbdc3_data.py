"""The DBDC3 Japanese evaluation data the repository ships (data/dbdc3-ja.tar.gz), for the
fixture scripts: its dialogues as parsed JSON, in the order of their paths."""

import json
import tarfile
from pathlib import Path

ARCHIVE = Path(__file__).resolve().parent.parent / "data" / "dbdc3-ja.tar.gz"


def dialogues(system: str | None = None) -> list[tuple[str, dict]]:
    """(path below the dataset's folder, e.g. "DCM/1502867549.log.json", dialogue) pairs,
    sorted by path; only those of one system (DCM, DIT, IRS) when given."""
    out = []
    with tarfile.open(ARCHIVE) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".log.json"):
                continue
            relative = member.name.split("/", 1)[1]
            if system is None or relative.split("/")[0] == system:
                out.append((relative, json.load(tar.extractfile(member))))
    return sorted(out, key=lambda pair: pair[0])
