"""Configs and command lines: one way to turn ``--field value`` into a typed config dataclass.

Every experiment has a config dataclass and a ``python -m stiefel_mini.experiments.<name>`` command
line. A config may be made of *parts*: a field whose type is itself a dataclass (a run's ``task``,
``model``, ``optimizer``). Its *leaf* fields are the scalar and tuple fields of the config and of its
parts, and their names are unique across the parts (:func:`leaf_fields` checks), so every leaf
keeps one flat name: on the command line (``--d_model 64``), in :func:`replace` and in the stored
form (:func:`stiefel_mini.experiments.records.config_dict`), which is flat whatever the nesting.

:func:`parse_config` type-checks ``--field value`` overrides against the leaves' annotations;
:func:`parse_cli` adds the two options every experiment shares, ``--preset NAME`` (the base config,
from the experiment's presets) and ``--out PATH`` (the results file), and ``--help``; :func:`cli` runs
a ``main`` so that a bad option ends in one line naming the field, not a traceback. :func:`split_argv`
sorts the tokens of a command line between two configs, for a sweep's command line
(:func:`stiefel_mini.experiments.runner.parse_sweep_cli`).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, Callable, Mapping, Sequence

__all__ = ["ConfigError", "leaf_fields", "leaf_values", "replace", "parse_config", "config_help", "parse_cli",
           "split_argv", "cli"]


class ConfigError(ValueError):
    """A command-line override names an unknown field or gives a value of the wrong type."""


def _is_part(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def leaf_fields(cls: type) -> dict[str, tuple[tuple[str, ...], Any]]:
    """Every leaf field of the config dataclass ``cls``: ``name -> (path, annotation)``.

    ``path`` is the attribute path from a ``cls`` instance, e.g. ``("model", "d_model")``; a field
    whose annotation is a dataclass is a part, walked in field order. Raises ``TypeError`` when two
    leaves share a name (the flat names would be ambiguous).
    """
    out: dict[str, tuple[tuple[str, ...], Any]] = {}
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        inner = ({name: ((f.name, *path), t) for name, (path, t) in leaf_fields(tp).items()}
                 if _is_part(tp) else {f.name: ((f.name,), tp)})
        clash = sorted(set(inner) & set(out))
        if clash:
            raise TypeError(f"{cls.__name__}: leaf field names {clash} occur in more than one part")
        out.update(inner)
    return out


def leaf_values(cfg: Any) -> dict[str, Any]:
    """The leaf fields of the config ``cfg`` and their values, flat, in :func:`leaf_fields` order."""
    out: dict[str, Any] = {}
    for name, (path, _) in leaf_fields(type(cfg)).items():
        value = cfg
        for attr in path:
            value = getattr(value, attr)
        out[name] = value
    return out


def replace(cfg: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that reaches into the parts: each keyword names a leaf field (or a
    field of ``cfg`` itself, a part included); the parts not named are shared, not copied.

    Raises ``TypeError`` naming an unknown field, as ``dataclasses.replace`` does.
    """
    cls = type(cfg)
    own = {f.name for f in dataclasses.fields(cls)}
    leaves = leaf_fields(cls)
    unknown = sorted(set(changes) - own - set(leaves))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown}; fields: {', '.join(leaves)}")
    direct = {k: v for k, v in changes.items() if k in own}
    by_part: dict[str, dict[str, Any]] = {}
    for k, v in changes.items():
        if k not in own:
            by_part.setdefault(leaves[k][0][0], {})[k] = v
    for part, sub in by_part.items():
        direct[part] = replace(direct.get(part, getattr(cfg, part)), **sub)
    return dataclasses.replace(cfg, **direct)


_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}
_NONE = {"none", "null"}


def _type_name(tp: Any) -> str:
    """Readable name of a type annotation, used in error messages and ``--help``."""
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _is_optional(tp: Any) -> tuple[bool, Any]:
    """(True, X) for ``Optional[X]`` / ``X | None``, else (False, tp)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _convert_scalar(text: str, tp: Any, field: str) -> Any:
    """Convert one command-line token to the scalar type ``tp`` (bool, int, float, str, Literal)."""
    optional, tp = _is_optional(tp)
    if optional and text.lower() in _NONE:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ConfigError(f"--{field}: expected one of {list(choices)}, got {text!r}")
    if tp is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"--{field}: expected bool (true/false), got {text!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--{field}: expected int, got {text!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--{field}: expected float, got {text!r}") from None
    if tp is str:
        return text
    raise ConfigError(f"--{field}: unsupported field type {_type_name(tp)}")


def _is_tuple(tp: Any) -> bool:
    _, inner = _is_optional(tp)
    return typing.get_origin(inner) in (tuple, typing.Tuple)


def _convert(tokens: list[str], tp: Any, field: str) -> Any:
    """Convert the tokens that follow ``--field`` to the annotated type (tuples take several tokens)."""
    optional, inner = _is_optional(tp)
    if not _is_tuple(tp):
        if len(tokens) != 1:
            raise ConfigError(f"--{field}: expected one {_type_name(tp)} value, got {len(tokens)}")
        return _convert_scalar(tokens[0], tp, field)
    if optional and len(tokens) == 1 and tokens[0].lower() in _NONE:
        return None
    # A single token may also hold the whole tuple, comma separated: --betas 0.9,0.98
    if len(tokens) == 1 and "," in tokens[0]:
        tokens = [t for t in tokens[0].split(",") if t != ""]
    args = typing.get_args(inner)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert_scalar(t, args[0], field) for t in tokens)
    if len(tokens) != len(args):
        raise ConfigError(
            f"--{field}: expected {len(args)} values of types "
            f"({', '.join(_type_name(a) for a in args)}), got {len(tokens)}"
        )
    return tuple(_convert_scalar(t, a, field) for t, a in zip(tokens, args))


def config_help(cls: type) -> str:
    """The ``--field type default`` lines of a config dataclass (its leaves, under each part's name),
    as ``--help`` prints them. Every field needs a default."""
    defaults = leaf_values(cls())
    lines = [f"{cls.__name__} options (--field value):"]
    part = ()
    for name, (path, tp) in leaf_fields(cls).items():
        if path[:-1] != part:
            part = path[:-1]
            lines.append(f"  {'.'.join(part)}:")
        lines.append(f"  --{name:<24} {_type_name(tp):<28} default {defaults[name]!r}")
    return "\n".join(lines)


def parse_config(cls: type, argv: Sequence[str] | None = None, base: Any = None) -> Any:
    """Build a ``cls`` dataclass from ``--field value`` overrides, type-checked against its annotations.

    ``argv`` defaults to ``sys.argv[1:]``; ``base`` (an instance of ``cls``) supplies the values not
    overridden, else the dataclass defaults. Accepted forms: ``--lr 3e-3``, ``--lr=3e-3``, bools as
    ``true/false/1/0/yes/no``, ``Optional`` fields as ``none``, tuples as several tokens or one comma
    list (``--betas 0.9 0.98`` or ``--betas 0.9,0.98``), ``Literal`` fields by value. Underscores and
    dashes in field names are interchangeable. ``-h``/``--help`` prints the fields and exits.

    Raises :class:`ConfigError` (a ``ValueError``) naming the field and the expected type on an unknown
    field, a missing value or a value that does not convert.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"parse_config expects a dataclass type, got {cls!r}")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(config_help(cls))
        raise SystemExit(0)
    hints = {name: tp for name, (_, tp) in leaf_fields(cls).items()}
    names = list(hints)
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ConfigError(f"expected --field, got {token!r}; fields: {', '.join(names)}")
        key, eq, inline = token[2:].partition("=")
        key = key.replace("-", "_")
        if key not in hints:
            raise ConfigError(f"unknown field --{key} for {cls.__name__}; fields: {', '.join(names)}")
        if eq:
            tokens = [inline]
            i += 1
        else:
            # Tuples take every token up to the next --field; scalars take exactly one.
            j = i + 1
            if _is_tuple(hints[key]):
                while j < len(argv) and not argv[j].startswith("--"):
                    j += 1
            else:
                j = min(i + 2, len(argv))
            tokens = argv[i + 1 : j]
            if not tokens:
                raise ConfigError(f"--{key}: missing value (expected {_type_name(hints[key])})")
            i = j
        values[key] = _convert(tokens, hints[key], key)
    return replace(cls() if base is None else base, **values)


def _preset(presets: Mapping[str, Any], name: str) -> Any:
    """``presets[name]``, or a :class:`ConfigError` listing the presets."""
    if name not in presets:
        raise ConfigError(f"--preset: expected one of {sorted(presets)}, got {name!r}")
    return presets[name]


def _pop(argv: list[str], option: str) -> tuple[str | None, list[str]]:
    """Remove ``--option VALUE`` / ``--option=VALUE`` from ``argv``; return (VALUE or None, the rest)."""
    for i, tok in enumerate(argv):
        if tok == f"--{option}":
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise ConfigError(f"--{option}: missing value")
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        if tok.startswith(f"--{option}="):
            return tok.partition("=")[2], argv[:i] + argv[i + 1 :]
    return None, argv


def parse_cli(cls: type, argv: Sequence[str] | None = None, *, presets: Mapping[str, Any] | None = None,
              default_preset: str | None = None, usage: str = "") -> tuple[Any, str | None, str | None]:
    """``(cfg, out, preset)`` from a command line: ``[--preset NAME] [--out PATH] [--field value ...]``.

    ``--preset`` picks the base config from ``presets`` (default ``default_preset``, else the
    dataclass defaults); the other ``--field value`` tokens override it (:func:`parse_config`).
    ``--out`` is the results file (``None`` if absent); when ``cls`` has an ``out`` field it is that
    field and is also returned; ``preset`` is the name used (``None``: none). ``-h``/``--help`` prints ``usage``, the presets and the fields, then
    exits.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        if usage:
            print(usage)
        if presets:
            print(f"--preset {{{'|'.join(presets)}}}" + (f" (default {default_preset})" if default_preset else ""))
        print("--out PATH                  results file (JSON)")
        print(config_help(cls))
        raise SystemExit(0)
    name, argv = _pop(argv, "preset") if presets is not None else (None, argv)
    name = name or default_preset
    base = _preset(presets, name) if (presets is not None and name is not None) else None
    has_out = "out" in leaf_fields(cls)
    out = None
    if not has_out:
        out, argv = _pop(argv, "out")
    cfg = parse_config(cls, argv, base=base)
    return cfg, (leaf_values(cfg)["out"] if has_out else out), name


def split_argv(argv: Sequence[str], cls: type) -> tuple[list[str], list[str]]:
    """Split ``--field value...`` tokens into those naming a leaf field of ``cls`` and the rest."""
    names = set(leaf_fields(cls))
    mine: list[str] = []
    rest: list[str] = []
    target = rest
    for tok in argv:
        if tok.startswith("--"):
            key = tok[2:].partition("=")[0].replace("-", "_")
            target = mine if key in names else rest
        target.append(tok)
    return mine, rest


def cli(main: Callable[[], Any]) -> None:
    """Run an experiment's ``main()``; a :class:`ConfigError` ends the process with one line."""
    try:
        main()
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
