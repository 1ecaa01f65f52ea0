"""Speculators found by name: every module in this package, and every module named in the environment variable
``GOOSE_SPECULATORS`` (comma-separated importable names: a speculator of your own is one file), that defines a
``Speculator`` subclass with a ``name`` is registered, in the order of the classes' ``order``.
``create("pld:max_ngram=3,draft=10")`` builds one from a command-line spec."""

from __future__ import annotations

import importlib
import os
import pkgutil

from drafting.engine.speculator import Option, Settings, Speculator, StepResult, option
from drafting.errors import SpecError

DEFAULT_SPECULATOR = "goose"  # what the API and `goose chat` use when none is named

__all__ = [
    "DEFAULT_SPECULATOR", "Option", "Settings", "Speculator", "StepResult", "SpecError", "option", "PLUGINS_ENV", "registry", "create",
    "parse_spec",
]

PLUGINS_ENV = "GOOSE_SPECULATORS"

_REGISTRY: dict[str, type[Speculator]] | None = None


def registry() -> dict[str, type[Speculator]]:
    """Every registered speculator class by name, in registry order (read once per process)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, type[Speculator]] = {}
        own = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)]
        for module_name in own + plugin_modules():
            module = _import(module_name)
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, Speculator) and obj.name and obj.__module__ == module.__name__:
                    taken = found.get(obj.name)
                    if taken is not None and taken is not obj:
                        raise SpecError(f"Speculator name {obj.name!r} of {module_name} is taken by {taken.__module__}.")
                    found[obj.name] = obj
        _REGISTRY = dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))
    return _REGISTRY


def plugin_modules() -> list[str]:
    """The modules named in ``GOOSE_SPECULATORS``."""
    return [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]


def _import(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"Cannot import the speculator module {module_name!r} named in {PLUGINS_ENV}: {exc}.") from None


def parse_spec(spec: str) -> tuple[type[Speculator], dict]:
    """The class and settings of ``name:key=value,...``, the settings checked (SpecError with one sentence)."""
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
    cls.settings_class(**settings)  # the settings' own checks, before any model is loaded
    return cls, settings


def _parse_value(cls: type[Speculator], key: str, text: str):
    opt = cls.options[key]
    try:
        return opt.parse(text)
    except ValueError:
        raise SpecError(f"Option {key!r} of speculator {cls.name!r} needs {opt.wants()}, not {text!r}.") from None


def create(spec: str) -> Speculator:
    cls, settings = parse_spec(spec)
    return cls(**settings)
