"""The language-model corpus: the address split, the committed tokenizer, bits per byte, batches."""

from __future__ import annotations

import math

import pytest
import torch

from stiefel_mini.experiments.lm import data as lm_data
from stiefel_mini.experiments.lm.experiment import bits_per_byte
from stiefel_mini.resources import results_path


@pytest.fixture(scope="module")
def tokenizer():
    return lm_data.load_tokenizer()


def test_every_address_is_in_exactly_one_split():
    names = lm_data.addresses()
    splits = lm_data.split_addresses(names)
    assert len(names) == 233
    seen = [n for part in splits.values() for n in part]
    assert sorted(seen) == names  # each address once, none lost
    assert len(splits["val"]) == 12 and len(splits["test"]) == 11


def test_the_held_out_addresses_are_spread_over_the_years():
    for part in (lm_data.VAL_ADDRESSES, lm_data.TEST_ADDRESSES):
        years = sorted(int(n[:4]) for n in part)
        assert years[0] < 1810 and years[-1] > 1995
        assert max(b - a for a, b in zip(years, years[1:])) <= 25


def test_a_missing_corpus_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv(lm_data.CORPUS_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="npm ci"):
        lm_data.corpus_dir()


def test_another_corpus_version_is_refused():
    with pytest.raises(ValueError, match="datasets-sotu 0.2.3"):
        lm_data.split_addresses(["1790_george_washington_n"])


def test_the_committed_tokenizer_is_what_its_command_makes_from_the_training_split(tokenizer):
    again = lm_data.train_tokenizer(lm_data.read_split("train"), 2048)
    assert again.to_str() == tokenizer.to_str()
    assert results_path("lm/tokenizer.json").read_text().strip() == again.to_str(pretty=True).strip()


def test_the_tokenizer_round_trips_every_held_out_address(tokenizer):
    unicode = [t for t in lm_data.read_split("train") if not t.isascii()]
    assert unicode  # some addresses hold curly quotes and dashes
    texts = lm_data.read_split("val") + lm_data.read_split("test") + unicode
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_token_bytes_count_the_utf8_bytes(tokenizer):
    nbytes = lm_data.token_bytes(tokenizer)
    text = "Fellow-Citizens — it’s good to be back. (Applause.)"
    ids = tokenizer.encode(text).ids
    assert int(nbytes[ids].sum()) == len(text.encode("utf-8"))
    split = lm_data.encode_split(tokenizer, lm_data.read_split("val"))
    assert int(nbytes[split.ids].sum()) == split.n_bytes  # EOT spells no byte
    assert nbytes[tokenizer.token_to_id(lm_data.EOT)] == 0


def test_windows_and_batches_are_shifted_by_one():
    ids = torch.arange(100)
    x, y = lm_data.eval_windows(ids, 10)
    assert x.shape == (9, 10) and torch.equal(y, x + 1) and torch.equal(x[:, 0], torch.arange(0, 90, 10))
    x, y = lm_data.eval_windows(ids, 10, limit=3)
    assert torch.equal(x[:, 0], torch.tensor([0, 40, 80]))
    x, y = lm_data.random_batch(ids, 5, 7, torch.Generator().manual_seed(0))
    assert x.shape == (5, 7) and torch.equal(y, x + 1) and int(y.max()) < 100


class _Uniform(torch.nn.Module):
    """Logits of zero: every token has probability 1 / vocab."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids):
        return type("Out", (), {"logits": torch.zeros(*input_ids.shape, self.vocab)})()


def test_bits_per_byte_of_a_uniform_model_is_log2_vocab_per_byte():
    vocab = 16
    nbytes = torch.arange(vocab) % 3 + 1  # tokens of 1, 2 or 3 bytes
    x = torch.randint(0, vocab, (5, 8), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, vocab, (5, 8), generator=torch.Generator().manual_seed(2))
    expected = y.numel() * math.log2(vocab) / int(nbytes[y].sum())
    assert bits_per_byte(_Uniform(vocab), x, y, nbytes, batch=2) == pytest.approx(expected, rel=1e-6)
