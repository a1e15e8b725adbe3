"""Tests of the CIFAR-10 data: the image folder, its cache, the stand-in, subsets and augmentation.

Everything runs on the tiny CIFAR-shaped ImageFolder set of `conftest.py` (never the real data).
"""

from __future__ import annotations


import pytest
import torch

from stiefel_mini.experiments.cifar import data as cifar_data
from stiefel_mini.experiments.cifar import train as cifar_train


def test_image_folder_loads_and_caches(tiny_root, tmp_path):
    data = cifar_data.load_cifar10(tiny_root)
    assert data.train_x.shape == (200, 3, 32, 32) and data.train_x.dtype == torch.uint8
    assert data.test_x.shape == (100, 3, 32, 32)
    assert data.train_y.bincount().tolist() == [20] * 10
    assert list((tmp_path / "cache").glob("cifar10-folder-*.pt")), "decoded tensors were not cached"
    again = cifar_data.load_cifar10(tiny_root)  # from the cache
    assert torch.equal(again.train_x, data.train_x) and torch.equal(again.test_y, data.test_y)


def test_environment_variable_points_at_the_folder(tiny_root, monkeypatch):
    monkeypatch.setenv(cifar_data.ENV_DATA_DIR, str(tiny_root))
    assert cifar_data.load_cifar10().source == str(tiny_root.resolve())


def test_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=cifar_data.ENV_DATA_DIR):
        cifar_data.load_cifar10(tmp_path / "nowhere")
    (tmp_path / "bad" / "train" / "cats").mkdir(parents=True)
    (tmp_path / "bad" / "test").mkdir(parents=True)
    with pytest.raises(ValueError, match="ten CIFAR-10 class folders"):
        cifar_data.load_cifar10(tmp_path / "bad")


def test_torchvision_route_without_download_says_how_to_get_it():
    # No folder configured and nothing downloaded into the (empty, per-test) cache.
    with pytest.raises(FileNotFoundError, match="CIFAR-10 was not found"):
        cifar_data.load_cifar10(download=False)


def test_augment_is_a_crop_and_flip_of_each_image():
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    out = cifar_data.augment(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == x.dtype
    # Every output is some 32x32 window of the zero-padded image, possibly mirrored.
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(16):
        found = any(
            torch.equal(out[i], w) or torch.equal(out[i], w.flip(-1))
            for dy in range(9) for dx in range(9) for w in [padded[i, :, dy : dy + 32, dx : dx + 32]]
        )
        assert found, f"image {i} is not a crop/flip"
    same = cifar_data.augment(x, torch.Generator().manual_seed(0))
    assert torch.equal(out, same), "augmentation must be fixed by the generator"


def test_balanced_subsets_are_nested_and_balanced():
    labels = torch.arange(10).repeat(50)  # 500 labels, 50 per class
    small = cifar_train.train_indices(labels, 0.2, torch.Generator().manual_seed(3))
    large = cifar_train.train_indices(labels, 0.6, torch.Generator().manual_seed(3))
    assert labels[small].bincount().tolist() == [10] * 10
    assert labels[large].bincount().tolist() == [30] * 10
    assert set(small.tolist()) <= set(large.tolist())
    assert not torch.equal(small, cifar_train.train_indices(labels, 0.2, torch.Generator().manual_seed(4)))
    assert cifar_train.train_indices(labels, 1.0, torch.Generator().manual_seed(0)).numel() == 500


def test_normalize_standardises_channels():
    x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    out = cifar_data.normalize(x)
    expected = (1.0 - torch.tensor(cifar_data.MEAN)) / torch.tensor(cifar_data.STD)
    assert torch.allclose(out[0, :, 0, 0], expected)


def test_synthetic_stand_in_is_balanced_labelled_and_deterministic():
    a = cifar_data.synthetic_cifar10(n_train=40, n_test=20, seed=3)
    b = cifar_data.synthetic_cifar10(n_train=40, n_test=20, seed=3)
    assert a.train_x.shape == (40, 3, 32, 32) and a.train_x.dtype == torch.uint8
    assert a.test_x.shape == (20, 3, 32, 32)
    assert torch.bincount(a.train_y, minlength=10).tolist() == [4] * 10
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_x, b.test_x)
    assert a.source == cifar_data.SYNTHETIC_SOURCE


def test_missing_data_falls_back_to_the_stand_in_with_a_warning(tmp_path):
    with pytest.warns(UserWarning, match="CIFAR-10 was not found"):
        data = cifar_data.load_cifar10_or_synthetic(tmp_path / "absent", n_train=20, n_test=10)
    assert data.source == cifar_data.SYNTHETIC_SOURCE and len(data.train_y) == 20
    with pytest.raises(FileNotFoundError, match="CIFAR-10 was not found"):
        cifar_data.load_cifar10(tmp_path / "absent")


def test_find_data_dir_prefers_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(cifar_data.ENV_DATA_DIR, str(tmp_path))
    assert cifar_data.find_data_dir() == tmp_path.resolve()
    monkeypatch.delenv(cifar_data.ENV_DATA_DIR)
    monkeypatch.setattr(cifar_data, "OFFLINE_COPY", tmp_path / "absent")
    assert cifar_data.find_data_dir() is None
    monkeypatch.setattr(cifar_data, "OFFLINE_COPY", tmp_path)
    assert cifar_data.find_data_dir() == tmp_path
