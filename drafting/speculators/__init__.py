"""Speculators found by name: every module in this package that defines a ``Speculator`` subclass with a
``name`` is registered. ``create("pld:max_ngram=3,draft=10")`` builds one from a command-line spec."""

from __future__ import annotations

import importlib
import pkgutil

from drafting.engine.speculator import Option, Speculator, StepResult
from drafting.errors import SpecError

__all__ = ["Option", "Speculator", "StepResult", "SpecError", "registry", "create", "parse_spec"]


_REGISTRY: dict[str, type[Speculator]] | None = None


def registry() -> dict[str, type[Speculator]]:
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, type[Speculator]] = {}
        for mod in pkgutil.iter_modules(__path__):
            if mod.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{mod.name}")
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, Speculator) and obj.name and obj.__module__ == module.__name__:
                    found[obj.name] = obj
        order = ["ar", "pld", "tr", "iso", "goose", "lookahead", "ptd"]
        _REGISTRY = dict(sorted(found.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])))
    return _REGISTRY


def _parse_value(cls: type[Speculator], key: str, text: str):
    opt = cls.options[key]
    if text in opt.choices:
        return text
    try:
        if opt.kind is bool:
            low = text.lower()
            if low in ("on", "true", "yes", "1"):
                return True
            if low in ("off", "false", "no", "0"):
                return False
            raise ValueError
        if opt.kind is tuple:  # n-gram lengths and the like: "5/4/3"
            return tuple(int(x) for x in text.replace("-", "/").split("/") if x)
        value = opt.kind(text)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError
        return value
    except ValueError:
        want = {bool: "on or off", int: "a non-negative integer", float: "a non-negative number", tuple: "numbers joined by /"}
        what = want.get(opt.kind, opt.kind.__name__)
        extra = f" (or {', '.join(opt.choices)})" if opt.choices else ""
        raise SpecError(f"Option {key!r} of speculator {cls.name!r} needs {what}{extra}, not {text!r}.") from None


def parse_spec(spec: str) -> tuple[type[Speculator], dict]:
    name, _, rest = spec.strip().partition(":")
    reg = registry()
    if name not in reg:
        raise SpecError(f"Unknown speculator {name!r}; known: {', '.join(reg)}.")
    cls = reg[name]
    settings = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise SpecError(f"Option {part!r} of speculator {name!r} needs the form key=value.")
        if key not in cls.options:
            known = ", ".join(cls.options) or "none"
            raise SpecError(f"Speculator {name!r} has no option {key!r}; its options: {known}.")
        settings[key] = _parse_value(cls, key, value)
    return cls, settings


def create(spec: str) -> Speculator:
    cls, settings = parse_spec(spec)
    return cls(**settings)
