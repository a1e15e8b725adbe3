"""CIFAR-10 as uint8 tensors: load once, cache, then batch, crop and flip on tensors.

Two sources, in this order:

1. a folder in ``torchvision.datasets.ImageFolder`` layout (``train/<class>/*.jpg``,
   ``test/<class>/*.jpg``), given as ``data_dir`` or through the environment variable
   ``STIEFEL_MINI_CIFAR_DIR``. This is the route for machines without internet. The images are
   decoded with PIL once and cached as a ``.pt`` file of uint8 tensors under
   ``~/.cache/stiefel_mini/`` (``STIEFEL_MINI_CACHE`` overrides), keyed on the folder's path and
   file listing, so later runs load in well under a second;
2. ``torchvision.datasets.CIFAR10(download=True)`` into the same cache folder, for users with
   internet.

Everything after loading is tensor work on whatever device the tensors live on, so the training
loop does no per-image PIL work and the same code runs on a CPU or a GPU.

Reference: Krizhevsky, "Learning Multiple Layers of Features from Tiny Images" (2009).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["CLASSES", "MEAN", "STD", "ENV_DATA_DIR", "ENV_CACHE_DIR", "IMAGE_SUFFIXES", "HOW_TO_GET", "Cifar10",
           "cache_dir", "OFFLINE_COPY", "find_data_dir", "resolve_data_dir", "load_image_folder", "load_torchvision",
           "load_cifar10", "SYNTHETIC_SOURCE", "synthetic_cifar10", "load_cifar10_or_synthetic", "balanced_subset",
           "normalize", "augment", "epoch_batches", "write_tiny_image_folder"]

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
"""CIFAR-10's label order; sorted folder names give exactly this order."""

# Channel statistics of the original CIFAR-10 training split, used by every source so that a
# model sees the same input scale whichever copy of the data it was trained on.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

ENV_DATA_DIR = "STIEFEL_MINI_CIFAR_DIR"
ENV_CACHE_DIR = "STIEFEL_MINI_CACHE"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")

HOW_TO_GET = (
    "CIFAR-10 was not found. Either\n"
    "  * point at a folder in ImageFolder layout (train/<class>/*.jpg, test/<class>/*.jpg, the\n"
    "    ten CIFAR-10 class names) with --data-dir DIR or the environment variable\n"
    f"    {ENV_DATA_DIR}=DIR (on this project's machines: ../shared/data/cifar10-jpeg), or\n"
    "  * run on a machine with internet, where torchvision downloads the original files\n"
    "    (about 170 MB) into the cache folder."
)


@dataclass
class Cifar10:
    """CIFAR-10 held as tensors.

    Attributes:
        train_x: (N_train, 3, 32, 32) uint8 images.
        train_y: (N_train,) int64 labels in ``CLASSES`` order.
        test_x: (N_test, 3, 32, 32) uint8 images.
        test_y: (N_test,) int64 labels.
        source: where the images came from (a folder path or ``"torchvision"``).
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str

    def to(self, device: torch.device | str) -> "Cifar10":
        """Move all four tensors (still uint8) to ``device``; 60k images are 184 MB."""
        tensors = (self.train_x, self.train_y, self.test_x, self.test_y)
        return Cifar10(*(t.to(device) for t in tensors), self.source)


def cache_dir() -> Path:
    """The folder for decoded tensors and torchvision downloads (outside the repository)."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stiefel_mini"


OFFLINE_COPY = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-jpeg"
"""The ImageFolder copy beside the repository on this project's machines (``../shared/data/cifar10-jpeg``)."""


def find_data_dir() -> Path | None:
    """Where CIFAR-10 is on this machine: ``$STIEFEL_MINI_CIFAR_DIR`` if set, else :data:`OFFLINE_COPY`
    if it exists, else ``None`` (then :func:`load_cifar10` downloads through torchvision).

    The one lookup the chapters use: ``load_cifar10_or_synthetic(find_data_dir())``.
    """
    env = os.environ.get(ENV_DATA_DIR)
    if env:
        return Path(env).expanduser().resolve()
    return OFFLINE_COPY if OFFLINE_COPY.is_dir() else None


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The ImageFolder root to use: ``data_dir`` if given, else ``$STIEFEL_MINI_CIFAR_DIR``, else None."""
    chosen = data_dir if data_dir not in (None, "") else os.environ.get(ENV_DATA_DIR) or None
    return None if chosen is None else Path(chosen).expanduser().resolve()


def _listing(split_dir: Path) -> list[tuple[int, Path]]:
    """(label, path) for every image under ``split_dir/<class>/``, in a fixed, sorted order."""
    classes = sorted(p.name for p in split_dir.iterdir() if p.is_dir())
    if tuple(classes) != CLASSES:
        raise ValueError(
            f"{split_dir} must hold exactly the ten CIFAR-10 class folders {list(CLASSES)}; "
            f"found {classes}.\n{HOW_TO_GET}"
        )
    items = []
    for label, name in enumerate(classes):
        files = sorted(p for p in (split_dir / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        items.extend((label, f) for f in files)
    return items


def _decode(items: list[tuple[int, Path]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode ``items`` with PIL into (N, 3, 32, 32) uint8 images and (N,) int64 labels."""
    from PIL import Image  # only this route needs Pillow

    x = np.empty((len(items), 32, 32, 3), dtype=np.uint8)
    for i, (_, path) in enumerate(items):
        with Image.open(path) as im:
            arr = np.asarray(im.convert("RGB"))
        if arr.shape != (32, 32, 3):
            raise ValueError(f"{path}: expected a 32x32 image, got {arr.shape[1]}x{arr.shape[0]}")
        x[i] = arr
    y = torch.tensor([label for label, _ in items], dtype=torch.int64)
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), y  # (N, 32, 32, 3) -> (N, 3, 32, 32)


def _folder_key(root: Path, listings: dict[str, list[tuple[int, Path]]]) -> str:
    """A cache key that changes when the folder's path, file names, sizes or times change."""
    h = hashlib.sha1(str(root).encode())
    for split, items in listings.items():
        for label, path in items:
            st = path.stat()
            h.update(f"{split}/{label}/{path.name}/{st.st_size}/{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def load_image_folder(root: Path, *, use_cache: bool = True) -> Cifar10:
    """Load an ImageFolder-layout copy of CIFAR-10, decoding once and caching the tensors.

    Args:
        root: folder with ``train/`` and ``test/``, each holding the ten class folders.
        use_cache: read and write ``cache_dir()/cifar10-folder-<key>.pt``.

    Returns:
        A ``Cifar10`` with uint8 tensors on the CPU.
    """
    if not (root / "train").is_dir() or not (root / "test").is_dir():
        raise FileNotFoundError(f"{root} has no train/ and test/ folders.\n{HOW_TO_GET}")
    listings = {split: _listing(root / split) for split in ("train", "test")}
    cache_file = cache_dir() / f"cifar10-folder-{_folder_key(root, listings)}.pt"
    if use_cache and cache_file.exists():
        tensors = torch.load(cache_file, weights_only=True)
    else:
        tensors = {}
        for split, items in listings.items():
            tensors[f"{split}_x"], tensors[f"{split}_y"] = _decode(items)
        if use_cache:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            # Write then rename, so that a run killed mid-write never leaves a truncated cache.
            tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
            torch.save(tensors, tmp)
            tmp.replace(cache_file)
    return Cifar10(source=str(root), **tensors)


def load_torchvision(download: bool = True) -> Cifar10:
    """Load the original CIFAR-10 through torchvision, downloading it into ``cache_dir()`` if asked."""
    try:
        from torchvision.datasets import CIFAR10
    except ImportError as err:  # torchvision is an optional dependency ("vision" extra)
        raise FileNotFoundError(f"torchvision is not installed.\n{HOW_TO_GET}") from err
    root = cache_dir() / "torchvision"
    try:
        train = CIFAR10(str(root), train=True, download=download)
        test = CIFAR10(str(root), train=False, download=download)
    except (RuntimeError, OSError) as err:  # no internet, or not downloaded and download=False
        raise FileNotFoundError(f"{err}\n{HOW_TO_GET}") from err

    def tensors(ds) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()  # (N, 32, 32, 3) -> (N, 3, 32, 32)
        return x, torch.tensor(ds.targets, dtype=torch.int64)

    (train_x, train_y), (test_x, test_y) = tensors(train), tensors(test)
    return Cifar10(train_x, train_y, test_x, test_y, source="torchvision")


def load_cifar10(data_dir: str | os.PathLike | None = None, *, download: bool = True) -> Cifar10:
    """Load CIFAR-10 from ``data_dir`` / ``$STIEFEL_MINI_CIFAR_DIR`` if set, else via torchvision.

    Raises:
        FileNotFoundError: the data set is not there, with a message that says how to get it.
    """
    root = resolve_data_dir(data_dir)
    if root is not None:
        if not root.is_dir():
            raise FileNotFoundError(f"data folder {root} does not exist.\n{HOW_TO_GET}")
        return load_image_folder(root)
    return load_torchvision(download=download)


SYNTHETIC_SOURCE = "SYNTHETIC stand-in (CIFAR-10 not found): accuracies on it are not CIFAR-10's"


def synthetic_cifar10(n_train: int = 5000, n_test: int = 1000, seed: int = 0) -> Cifar10:
    """A labelled stand-in with CIFAR-10's shapes, for machines that have neither the data nor internet.

    Class ``c`` is a fixed random colour pattern ``T_c``; every image is ``(T_c + U) / 2`` with fresh
    uniform noise ``U``, so the classes can be learned but nothing about CIFAR-10 carries over.
    Labels cycle through the classes, so the set is balanced. ``source`` says what it is.

    Shapes: ``train_x`` ``(n_train, 3, 32, 32)`` uint8, ``test_x`` ``(n_test, 3, 32, 32)`` uint8.
    """
    g = torch.Generator().manual_seed(seed)
    templates = torch.rand(len(CLASSES), 3, 32, 32, generator=g)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.arange(n) % len(CLASSES)
        images = 0.5 * templates[labels] + 0.5 * torch.rand(n, 3, 32, 32, generator=g)
        return (255 * images).round().to(torch.uint8), labels

    (train_x, train_y), (test_x, test_y) = draw(n_train), draw(n_test)
    return Cifar10(train_x, train_y, test_x, test_y, source=SYNTHETIC_SOURCE)


def load_cifar10_or_synthetic(
    data_dir: str | os.PathLike | None = None, *, download: bool = True, n_train: int = 5000, n_test: int = 1000
) -> Cifar10:
    """:func:`load_cifar10`, or :func:`synthetic_cifar10` with a warning when CIFAR-10 is not there.

    For chapters that must run on a reader's machine without the data; experiments that report
    CIFAR-10 numbers call :func:`load_cifar10`, which raises instead.
    """
    try:
        return load_cifar10(data_dir, download=download)
    except FileNotFoundError as err:
        warnings.warn(f"{err}\nUsing a synthetic stand-in instead.", stacklevel=2)
        return synthetic_cifar10(n_train, n_test)


def balanced_subset(labels: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Indices of ``n`` examples, ``n / n_classes`` per class, drawn by ``generator``.

    Each class's examples are taken in the order of one random permutation of the whole set, so
    for a fixed generator state a smaller subset is contained in a larger one (nested fractions).

    Args:
        labels: (N,) int64 labels.
        n: subset size; must be a multiple of the number of classes and at most N.
        generator: CPU generator; its state fixes the subset.

    Returns:
        (n,) int64 indices, sorted.
    """
    n_classes = int(labels.max()) + 1
    if n % n_classes or n > labels.numel():
        raise ValueError(f"subset size {n} must be a multiple of {n_classes} and at most {labels.numel()}")
    order = torch.randperm(labels.numel(), generator=generator)
    per_class = n // n_classes
    picks = []
    for c in range(n_classes):
        of_class = order[labels.cpu()[order] == c]
        if of_class.numel() < per_class:
            raise ValueError(f"class {c} has {of_class.numel()} examples, fewer than {per_class}")
        picks.append(of_class[:per_class])
    return torch.cat(picks).sort().values


def normalize(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 images (B, 3, H, W) -> standardised floats: (x / 255 - mean) / std per channel."""
    mean = torch.tensor(MEAN, dtype=dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=dtype, device=x.device).view(1, 3, 1, 1)
    return (x.to(dtype) / 255.0 - mean) / std


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding, then random horizontal flip, for a whole batch at once.

    The standard CIFAR augmentation (He et al., 2016), done with one gather instead of a PIL
    transform per image. All randomness comes from ``generator`` (a CPU generator, so that the
    batch order and augmentation are identical across devices and across arms of a paired run).

    Args:
        x: (B, C, H, W) images, any dtype.
        generator: CPU generator.
        pad: padding on each side; the crop offset is uniform in [0, 2 * pad].

    Returns:
        (B, C, H, W) augmented images, same dtype and device as ``x``.
    """
    b, _, h, w = x.shape
    off_y = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator)
    off_x = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator)
    flip = torch.rand(b, 1, generator=generator) < 0.5
    rows = (off_y + torch.arange(h)).to(x.device)  # (B, H) rows of the padded image
    cols = off_x + torch.arange(w)  # (B, W)
    cols = torch.where(flip, cols.flip(1), cols).to(x.device)  # a flip reverses the column order
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))  # (B, C, H + 2p, W + 2p)
    batch = torch.arange(b, device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()  # (B, C, H, W)


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch's shuffled index batches; the last, short batch is dropped so every step is equal."""
    order = torch.randperm(n, generator=generator)
    return list(order[: n - n % batch_size].split(batch_size)) if n >= batch_size else [order]


def write_tiny_image_folder(root: str | os.PathLike, n_train: int = 20, n_test: int = 10, seed: int = 0) -> Path:
    """Write a tiny, learnable CIFAR-shaped ImageFolder set (for tests and the repro record).

    Each class is a colour and stripe pattern plus noise, saved as 32x32 JPEGs in
    ``root/{train,test}/<class>/NNNN.jpg``, so the same loading code as for the real data runs.

    Args:
        root: output folder (created).
        n_train, n_test: images per class in each split.
        seed: numpy seed for the noise.

    Returns:
        ``Path(root)``.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    root = Path(root)
    yy, xx = np.mgrid[0:32, 0:32]
    for split, count in (("train", n_train), ("test", n_test)):
        for label, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            colour = np.array([(label * 83) % 256, (label * 151) % 256, (label * 47 + 90) % 256], dtype=np.float64)
            stripes = np.sin((xx * np.cos(label) + yy * np.sin(label)) * 0.6)[..., None]  # (32, 32, 1)
            for i in range(count):
                img = colour + 60.0 * stripes + rng.normal(0.0, 25.0, size=(32, 32, 3))
                Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(folder / f"{i:04d}.jpg", quality=95)
    return root
