"""The weight formats are listed once (drafting.weights.formats) and everything that names them reads that list:
the --weights help, the error for an unknown one, the doctor's modes, the probe's candidates."""

from __future__ import annotations

import re

import pytest
import torch
from support.cli import ROOT

from drafting.errors import WeightsError
from drafting.weights.formats import (AUTO, CHOICES, SAME_NUMBERS, WEIGHT_FORMATS, check_format, format_key,
                                      weight_format, weights_help)

CPU = torch.device("cpu")
PLACES = [(torch.device(d), dt) for d in ("cpu", "cuda") for dt in (torch.float32, torch.bfloat16, torch.float16)]


def test_every_format_is_declared_in_its_own_file_once():
    files = {f.layer.__module__ if f.layer is not None else None for f in WEIGHT_FORMATS.values()} - {None}
    assert len(files) == len([f for f in WEIGHT_FORMATS.values() if f.layer is not None])  # one layer file each
    for name, fmt in WEIGHT_FORMATS.items():
        assert fmt.name == name and fmt.help and "\n" not in fmt.help
        for other in (fmt.one_row_as, fmt.trees_as):
            assert other is None or WEIGHT_FORMATS[other].same_numbers  # a kernel of a known exact format
    assert CHOICES == (AUTO, *WEIGHT_FORMATS)
    assert SAME_NUMBERS == tuple(n for n, f in WEIGHT_FORMATS.items() if f.same_numbers)


@pytest.mark.parametrize("name", list(WEIGHT_FORMATS))
def test_a_format_refused_somewhere_says_why_in_one_sentence_naming_it(name):
    fmt = WEIGHT_FORMATS[name]
    for device, dtype in PLACES:
        why = fmt.refusal(device, dtype)
        if why is None:
            fmt.check(device, dtype)
            continue
        assert f"--weights {name}" in why and why.endswith(".") and "\n" not in why
        with pytest.raises(WeightsError, match=re.escape(why)):
            fmt.check(device, dtype)
        with pytest.raises(WeightsError, match=re.escape(why)):
            check_format(name, device, dtype)
        assert not fmt.available(device, dtype)


def test_an_unknown_name_lists_every_choice():
    with pytest.raises(WeightsError) as err:
        weight_format("int4")
    assert str(err.value) == f"Unknown weight format 'int4'; use {', '.join(CHOICES[:-1])} or {CHOICES[-1]}."
    check_format(AUTO, CPU, torch.float32)  # auto is a choice, not a format: always accepted


@pytest.mark.parametrize("command", ["bench", "chat", "viz"])
def test_the_weights_option_help_is_read_from_the_formats(command, capsys):
    import click
    import typer.main

    from goosecli.main import app

    cmd = typer.main.get_command(app).commands[command]
    cmd.format_help(click.Context(cmd), click.HelpFormatter())  # the help, as --help shows it, fills it in
    option = next(p for p in cmd.params if p.name == "weights")
    assert option.help == weights_help()
    for fmt in WEIGHT_FORMATS.values():
        assert f"{fmt.name} ({fmt.help})" in option.help
    assert " / ".join(SAME_NUMBERS) in option.help  # what auto chooses among


def test_format_key_is_the_name_plus_what_a_format_adds():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    for name, fmt in WEIGHT_FORMATS.items():
        if fmt.key_part is None:
            assert format_key(net, name) == name


@pytest.mark.skipif(not WEIGHT_FORMATS["mkl"].available(CPU, torch.float32), reason="no working MKL packed product")
def test_mkls_key_adds_the_few_row_products_it_leaves_to_torch():
    from drafting.weights.mkl import MKLPackedLinear

    net = torch.nn.Sequential(MKLPackedLinear(torch.nn.Linear(4, 3)), MKLPackedLinear(torch.nn.Linear(3, 2)))
    assert format_key(net, "mkl") == "mkl"  # the packed product from two rows up: nothing to add
    net[1].torch_rows = 4
    assert format_key(net, "mkl") == "mkl|torch 2x3<=4"  # the key string caches were written under


def test_no_list_of_format_names_outside_the_weights_package():
    """A format is added in its own file and the registry; nothing else names the formats as strings."""
    names = [n for n in WEIGHT_FORMATS if n != "float"]  # "float" is also the as-loaded default everywhere
    pattern = re.compile("[\"'](" + "|".join(map(re.escape, names)) + ")[\"']")
    found = []
    for folder in ("drafting", "goosecli", "tui", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent == ROOT / "drafting" / "weights":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "\n".join(found)
