"""Token data for the LM task: a byte tokenizer, four sources, and batches that are pure functions of step.

Sources (``DataConfig.source``)
-------------------------------
- ``litmix``: the default corpus, ~33 MB of public-domain English built from pinned registry packages by
  ``corpora.litmix`` (prepared on first use into the data directory; validation = whole held-out documents).
- ``text_files``: a glob of UTF-8 ``.txt`` files. Whole files go to validation by a stable hash rule (see
  ``split_files``), so adding a file never moves another one between splits.
- ``tokens``: pre-tokenized ids, a raw ``.bin`` (uint8 when ``vocab_size <= 256``, else uint16) or a ``.npy``.
  Validation is ``val_path`` if given, else the last ``val_fraction`` of the ids as one contiguous block.
- ``synthetic``: a small corpus generated from a fixed probabilistic grammar (no download; identical on every
  machine). It has real structure (agreement, fixed phrases) so a model's loss falls well below log(256).

Text is tokenized at the byte level (vocab 256; ``ByteTokenizer``). Documents are joined with ``DOC_SEP``.

Batches (``TokenBatches``)
--------------------------
The training ids are cut into ``n_windows`` windows of ``seq_len + 1`` tokens (inputs and shifted targets
share all but one token). Epoch ``e`` visits the windows in the order ``permutation(n_windows)`` drawn from
``np.random.default_rng([seed, e])``, with the window grid shifted by an offset drawn from the same generator
so different epochs see different cut points. Global batch ``step`` is window slots
``[step·B, (step+1)·B)`` of that endless sequence, so ``get(step)`` depends on ``(data, seed, step)`` only: a
resumed run sees exactly the batches it would have seen. With DDP, rank ``r`` of ``W`` takes rows
``[r·B/W, (r+1)·B/W)`` of the global batch, so the ranks' shards concatenated in rank order are the global
batch. Token arrays are numpy memmaps when they come from files (``litmix``, ``tokens``). torch is imported
only where a batch becomes a tensor, so ``DataConfig`` validates a config without it.
"""

from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from corpora.common import DOC_SEP, default_data_dir  # noqa: F401 (default_data_dir: re-exported)

if TYPE_CHECKING:
    import torch

SOURCES = ("litmix", "text_files", "tokens", "synthetic")


class ByteTokenizer:
    """UTF-8 bytes as tokens: ids 0..255, no special tokens, lossless for any text."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        """``text`` → uint8 ids (its UTF-8 bytes)."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()

    def decode(self, ids: np.ndarray | torch.Tensor | list[int]) -> str:
        """ids → text; byte sequences that are not valid UTF-8 (e.g. a cut character) become U+FFFD."""
        if hasattr(ids, "detach"):  # a torch.Tensor (maybe on a GPU)
            ids = ids.detach().cpu().numpy()
        return bytes(np.asarray(ids, dtype=np.uint8).tobytes()).decode("utf-8", errors="replace")


@dataclass
class DataConfig:
    """What to train on and how to cut it into sequences (the ``data`` config group)."""

    source: str = "litmix"
    """One of ``SOURCES``."""
    path: str | None = None
    """``text_files``: a glob (``**`` allowed); ``tokens``: a ``.bin`` or ``.npy`` file. Unused otherwise."""
    val_path: str | None = None
    """``tokens`` only: validation ids (same format); default is the tail ``val_fraction`` of ``path``."""
    vocab_size: int | None = None
    """``tokens`` only: vocabulary size (required for ``.bin``; selects uint8 ≤ 256 < uint16 ≤ 65536)."""
    seq_len: int = 256
    """Tokens per training sequence."""
    data_dir: str | None = None
    """Where ``litmix`` is prepared; default ``$MXSWEEP_DATA_DIR`` or ``<repo>/data``."""
    seed: int = 0
    """Seeds the window order; the data itself and the validation batches do not depend on it."""
    val_fraction: float = 0.05
    """``text_files``: expected share of files held out; ``tokens`` without ``val_path``: tail share."""
    synthetic_bytes: int = 262_144
    """``synthetic`` only: approximate corpus size in bytes."""

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"data.source={self.source!r} unknown; use one of {', '.join(SOURCES)}")
        if not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise ValueError(f"data.seq_len must be an integer >= 1, got {self.seq_len!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"data.seed must be an integer >= 0, got {self.seed!r}")
        if not 0.0 < self.val_fraction <= 0.5:
            raise ValueError(f"data.val_fraction must be in (0, 0.5], got {self.val_fraction!r}")
        if self.synthetic_bytes < 4096:
            raise ValueError(f"data.synthetic_bytes must be >= 4096, got {self.synthetic_bytes!r}")
        needs_path = self.source in ("text_files", "tokens")
        if needs_path and not self.path:
            hint = "a glob of .txt files" if self.source == "text_files" else "a .bin or .npy token file"
            raise ValueError(f"data.path is required for data.source={self.source!r}; set it to {hint}")
        if not needs_path and self.path is not None:
            raise ValueError(f"data.path is unused by data.source={self.source!r}; remove it")
        if self.source != "tokens":
            for name in ("val_path", "vocab_size"):
                if getattr(self, name) is not None:
                    raise ValueError(f"data.{name} is only used by data.source='tokens'; remove it")
            return
        suffix = Path(self.path).suffix
        if suffix not in (".bin", ".npy"):
            raise ValueError(f"data.path={self.path!r} must end in .bin or .npy for data.source='tokens'")
        if self.vocab_size is None and suffix == ".bin":
            raise ValueError("data.vocab_size is required for a .bin token file (it fixes uint8 vs uint16)")
        if self.vocab_size is not None and not 1 <= self.vocab_size <= 65536:
            raise ValueError(f"data.vocab_size must be in [1, 65536], got {self.vocab_size!r}")


class TokenBatches:
    """Training batches as a pure function of ``(seed, step)``, plus fixed validation batches.

    ``batch_size`` is the *global* batch; this object yields rank ``rank``'s rows of it.
    """

    def __init__(
        self,
        train: np.ndarray,
        val: np.ndarray,
        *,
        seq_len: int,
        batch_size: int,
        vocab_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1 and 0 <= rank < world_size, got {batch_size}, {rank}, {world_size}"
            )
        if batch_size % world_size:
            raise ValueError(f"batch_size={batch_size} must be divisible by world_size={world_size}")
        self.train, self.val = train, val
        self.seq_len, self.batch_size, self.vocab_size = seq_len, batch_size, vocab_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.local_batch_size = batch_size // world_size
        # One window spans seq_len + 1 tokens; leave seq_len - 1 spare tokens for the per-epoch offset.
        self.n_windows = (len(train) - seq_len) // seq_len
        if self.n_windows < 1:
            raise ValueError(
                f"training data has {len(train)} tokens, too few for data.seq_len={seq_len}; "
                f"use a shorter seq_len or more data"
            )
        self._epoch_cache: tuple[int, np.ndarray, int] | None = None

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one *global* batch (all ranks): ``batch_size · seq_len``."""
        return self.batch_size * self.seq_len

    def epoch(self, step: int) -> float:
        """Epochs of training data consumed by steps ``0 .. step-1`` (so ``epoch(0) == 0``)."""
        return step * self.batch_size / self.n_windows

    def _epoch_order(self, epoch: int) -> tuple[np.ndarray, int]:
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            offset = int(rng.integers(self.seq_len))
            self._epoch_cache = (epoch, rng.permutation(self.n_windows), offset)
        return self._epoch_cache[1], self._epoch_cache[2]

    def _window_starts(self, step: int) -> np.ndarray:
        first = step * self.batch_size + self.rank * self.local_batch_size
        slots = np.arange(first, first + self.local_batch_size, dtype=np.int64)
        starts = np.empty_like(slots)
        for epoch in np.unique(slots // self.n_windows):
            mask = slots // self.n_windows == epoch
            order, offset = self._epoch_order(int(epoch))
            starts[mask] = order[slots[mask] % self.n_windows] * self.seq_len + offset
        return starts

    def _gather(self, tokens: np.ndarray, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        idx = starts[:, None] + np.arange(self.seq_len + 1)  # (B, T+1)
        chunk = torch.from_numpy(np.asarray(tokens[idx], dtype=np.int64))
        return chunk[:, :-1], chunk[:, 1:]

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each a LongTensor (local_batch_size, seq_len), for training step ``step``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return self._gather(self.train, self._window_starts(step))

    def val_batches(self, n_batches: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``n_batches`` fixed validation batches (this rank's rows): non-overlapping windows spread evenly
        over the validation ids. They depend on neither ``seed`` nor any step."""
        n_val = (len(self.val) - 1) // self.seq_len
        need = n_batches * self.batch_size
        if need > n_val:
            raise ValueError(
                f"{n_batches} validation batches need {need} windows of {self.seq_len} tokens, but the "
                f"validation split has {n_val}; use at most {n_val // self.batch_size} batches"
            )
        starts = np.linspace(0, n_val - 1, need).round().astype(np.int64) * self.seq_len
        rows = starts.reshape(n_batches, self.world_size, self.local_batch_size)[:, self.rank]
        return [self._gather(self.val, r) for r in rows]


def make_batches(cfg: DataConfig, batch_size: int, *, rank: int = 0, world_size: int = 1) -> TokenBatches:
    """Load ``cfg``'s data (preparing ``litmix`` on first use) and return its batches for this rank."""
    train, val, vocab_size = load_tokens(cfg)
    return TokenBatches(
        train,
        val,
        seq_len=cfg.seq_len,
        batch_size=batch_size,
        vocab_size=vocab_size,
        seed=cfg.seed,
        rank=rank,
        world_size=world_size,
    )


def load_tokens(cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """(train ids, val ids, vocab size) for ``cfg``'s source."""
    if cfg.source == "litmix":
        from corpora import ensure_litmix

        paths = ensure_litmix(cfg.data_dir)
        return _memmap(paths["train"], np.uint8), _memmap(paths["val"], np.uint8), ByteTokenizer.vocab_size
    if cfg.source == "synthetic":
        train_docs, val_docs = synthetic_documents(cfg.synthetic_bytes)
        return _join(train_docs), _join(val_docs), ByteTokenizer.vocab_size
    if cfg.source == "text_files":
        train_files, val_files = split_files(_glob_files(cfg.path), cfg.val_fraction)
        read = lambda files: [Path(f).read_bytes() for f in files]  # noqa: E731
        return _join(read(train_files)), _join(read(val_files)), ByteTokenizer.vocab_size
    return _load_token_source(cfg)


# ------------------------------------------------------------------------------------------------------------
# text_files and tokens


def _glob_files(pattern: str) -> list[str]:
    files = sorted(f for f in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(f))
    if len(files) < 2:
        raise ValueError(
            f"data.path={pattern!r} matches {len(files)} file(s); text_files needs at least 2 "
            f"(whole files are held out for validation)"
        )
    return files


def _file_rank(path: str) -> float:
    digest = hashlib.sha256(os.path.basename(path).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_files(files: list[str], val_fraction: float) -> tuple[list[str], list[str]]:
    """Split whole files into (train, val): a file is validation iff the sha256 of its *basename*, read as a
    number in [0, 1), is below ``val_fraction``. If that picks none (few files), the file with the smallest
    hash is validation. The rule is stable: adding or removing files never moves another file."""
    ranks = {f: _file_rank(f) for f in files}
    val = [f for f in files if ranks[f] < val_fraction] or [min(files, key=ranks.__getitem__)]
    train = [f for f in files if f not in val]
    if not train:
        raise ValueError(f"data.val_fraction={val_fraction} leaves no training file among {len(files)}")
    return train, val


def _join(docs: list[bytes]) -> np.ndarray:
    return np.frombuffer(DOC_SEP.join(docs) + DOC_SEP, dtype=np.uint8)


def _memmap(path: str | Path, dtype: type) -> np.ndarray:
    return np.memmap(path, dtype=dtype, mode="r")


def _load_token_source(cfg: DataConfig) -> tuple[np.ndarray, np.ndarray, int]:
    def load(path: str) -> np.ndarray:
        if not os.path.isfile(path):
            raise ValueError(f"token file {path!r} does not exist; check data.path / data.val_path")
        if path.endswith(".npy"):
            arr = np.load(path, mmap_mode="r")
            if arr.ndim != 1 or arr.dtype.kind not in "iu":
                raise ValueError(f"{path!r} must hold a 1-D integer array, got {arr.dtype} {arr.shape}")
            return arr
        return _memmap(path, np.uint8 if cfg.vocab_size <= 256 else np.uint16)

    train = load(cfg.path)
    if cfg.val_path is not None:
        val = load(cfg.val_path)
    else:
        cut = len(train) - max(cfg.seq_len + 1, int(len(train) * cfg.val_fraction))
        train, val = train[:cut], train[cut:]
    vocab_size = cfg.vocab_size if cfg.vocab_size is not None else int(max(train.max(), val.max())) + 1
    for name, arr in (("data.path", train), ("data.val_path", val)):
        if len(arr) and (int(arr.max()) >= vocab_size or int(arr.min()) < 0):
            raise ValueError(f"{name} holds ids outside [0, {vocab_size}); check data.vocab_size")
    return train, val, vocab_size


# ------------------------------------------------------------------------------------------------------------
# synthetic


_SUBJECTS = {
    "sg": ["the cat", "a dog", "the old man", "my sister", "the king", "a small bird", "the teacher"],
    "pl": ["the cats", "two dogs", "the children", "my friends", "the soldiers", "many birds"],
}
_VERBS = {  # (singular, plural)
    "see": ("sees", "see"),
    "like": ("likes", "like"),
    "follow": ("follows", "follow"),
    "carry": ("carries", "carry"),
    "watch": ("watches", "watch"),
}
_OBJECTS = ["the river", "a red apple", "the long road", "an empty house", "the green hill", "a wooden box"]
_ADVERBS = ["slowly", "every morning", "in the rain", "without a word", "again and again"]


def _sentence(rng: np.random.Generator) -> str:
    number = "sg" if rng.random() < 0.6 else "pl"
    subject = _SUBJECTS[number][rng.integers(len(_SUBJECTS[number]))]
    verb = list(_VERBS.values())[rng.integers(len(_VERBS))][number == "pl"]
    words = [subject, verb, _OBJECTS[rng.integers(len(_OBJECTS))]]
    if rng.random() < 0.4:
        words.append(_ADVERBS[rng.integers(len(_ADVERBS))])
    if rng.random() < 0.3:  # a relative clause agreeing with the object (always singular)
        words.append("that " + list(_VERBS.values())[rng.integers(len(_VERBS))][0] + " " + _OBJECTS[0])
    text = " ".join(words)
    return text[0].upper() + text[1:] + ("?" if rng.random() < 0.1 else ".")


def synthetic_documents(n_bytes: int, val_every: int = 10) -> tuple[list[bytes], list[bytes]]:
    """(train docs, val docs) of a fixed grammar corpus of about ``n_bytes`` bytes; every ``val_every``-th
    paragraph (document) is validation. Deterministic: the generator seed is a constant."""
    rng = np.random.default_rng(20261129)
    train: list[bytes] = []
    val: list[bytes] = []
    total = 0
    while total < n_bytes:
        doc = " ".join(_sentence(rng) for _ in range(int(rng.integers(3, 9)))).encode("utf-8")
        (val if (len(train) + len(val)) % val_every == val_every - 1 else train).append(doc)
        total += len(doc) + len(DOC_SEP)
    return train, val
