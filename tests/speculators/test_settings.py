"""Speculator settings are frozen, validated dataclasses: every option has help and a kind, every changed
setting round-trips through ``spec()``, the options goose, iso and tr share are declared once, and the
registry's order and in-model rows come from the classes."""

from __future__ import annotations

import dataclasses

import pytest

from drafting.engine.speculator import Settings
from drafting.errors import SpecError
from drafting.speculators import create, parse_spec, registry


def changed_value(key: str, opt, tmp_path):
    """A value other than the default that every speculator's checks accept."""
    if opt.words and opt.default in opt.words:
        return 8
    if opt.kind is bool:
        return not opt.default
    if opt.kind is int:
        return opt.default + 1
    if opt.kind is float:
        return opt.default + 0.25
    if opt.kind is tuple:
        return (3, 2)
    return str(tmp_path / f"{key}.npz")


@pytest.mark.parametrize("name", list(registry()))
def test_settings_are_a_frozen_dataclass_of_documented_options(name):
    cls = registry()[name]
    spec = create(name)
    assert isinstance(spec.settings, cls.settings_class) and issubclass(cls.settings_class, Settings)
    fields = dataclasses.fields(cls.settings_class)
    assert [f.name for f in fields] == list(cls.options)
    for f in fields:
        opt = cls.options[f.name]
        assert opt.help and opt.kind in (bool, int, float, str, tuple)
        assert f.default == opt.default == getattr(spec.settings, f.name)
    if fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec.settings, fields[0].name, fields[0].default)
    assert not hasattr(spec.settings, "no_such_setting")
    assert spec.spec() == name


@pytest.mark.parametrize("name", list(registry()))
def test_every_changed_setting_round_trips_through_spec(name, tmp_path):
    cls = registry()[name]
    for key, opt in cls.options.items():
        value = changed_value(key, opt, tmp_path)
        spec = create(f"{name}:{key}={opt.format(value)}")
        assert getattr(spec.settings, key) == value
        assert spec.spec() == f"{name}:{key}={opt.format(value)}"
        again = create(spec.spec())
        assert again.settings == spec.settings and again.spec() == spec.spec()


def test_checks_run_when_a_spec_is_parsed():
    for bad, sentence in [
        ("pld:min_ngram=0", "pld needs 1 <= min_ngram <= max_ngram."),
        ("iso:k=0", "iso needs k >= 1."),
        ("lookahead:rows=0", "lookahead needs rows >= 1 (1 = plain steps) or rows=auto."),
        ("ptd:depth=1", "ptd needs window >= 1, width >= 1, depth >= 2, seed_n >= 2 and riders >= 0."),
    ]:
        with pytest.raises(SpecError) as err:
            parse_spec(bad)
        assert str(err.value) == sentence


def test_tree_speculators_share_one_declaration_of_their_common_options():
    reg = registry()
    for key in ("harvest_window", "cache", "min_score"):
        helps = {reg[n].options[key].help for n in ("goose", "iso", "tr") if key in reg[n].options}
        assert len(helps) == 1, key
    for key in ("budget", "bigram", "harvest"):
        starts = {reg[n].options[key].help.split(" (")[0] for n in ("goose", "iso", "tr")}
        assert len(starts) == 1, key  # one text; only a speculator's own note in brackets differs


def test_registry_order_and_row_drafters_come_from_the_classes():
    reg = registry()
    orders = [cls.order for cls in reg.values()]
    assert orders == sorted(orders)
    assert list(reg)[:7] == ["ar", "pld", "tr", "iso", "goose", "lookahead", "ptd"]
    assert {n for n, cls in reg.items() if cls.draws_rows} >= {"lookahead", "ptd"}
    assert not any(reg[n].draws_rows for n in ("ar", "pld", "tr", "iso", "goose"))
