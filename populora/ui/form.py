"""The Launch form, generated from the training config schema (``TrainConfig``), and the evaluation form, from
``EvalConfig``: one widget per field, its description as the help text, so a new config field shows up here
without touching the UI.

Widgets carry no bounds of their own: pydantic is the one place values are checked, and its errors come back
per dotted field so the page shows each one under its widget.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import streamlit as st
from pydantic import BaseModel, ValidationError

from populora.platform import config as config_io
from populora.training import TrainConfig, load_config, presets  # noqa: F401 - presets: listed by the Launch page

# The fields a researcher sets for most runs; everything else sits in "advanced" expanders per section.
MAIN_FIELDS = [
    "name", "steps", "model.base", "model.lora_rank", "population.teachers", "population.students",
    "population.single_agent", "matchmaking.teachers_per_student", "matchmaking.pfsp",
    "evolution.every", "evolution.replace_fraction", "evolution.crossover_prob", "evolution.selection",
    "checkpoint.every", "checkpoint.keep",  # what a fork can start from (``experiments.fork_points``), said at launch
]


def preset_values(path: Path | None) -> dict:
    """The preset merged over the schema defaults, as plain JSON-able values (raises ConfigError)."""
    return load_config(path).model_dump(mode="json")


def schema_fields(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, pydantic FieldInfo) of every leaf field, in schema order."""
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += schema_fields(ann, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", info))
    return out


def _unwrap_optional(ann) -> tuple[Any, bool]:
    if get_origin(ann) in (Union, types.UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return ann, False


NONE = "(none)"  # an optional choice's "not set"


def widget(path: str, info, value: Any, key: str) -> Any:
    """Draw one field's widget and return the raw value to validate."""
    ann, optional = _unwrap_optional(info.annotation)
    label, help_text = (path if path in MAIN_FIELDS else path.split(".")[-1]), info.description
    if get_origin(ann) is Literal:
        options = ([NONE] if optional else []) + list(get_args(ann))  # an optional choice keeps "none" as a choice
        value = NONE if optional and value is None else value
        picked = st.selectbox(label, options, index=options.index(value) if value in options else 0, help=help_text, key=key)
        return None if picked == NONE else picked
    if get_origin(ann) is list:
        (item,) = get_args(ann) or (str,)
        if get_origin(item) is Literal:
            return st.multiselect(label, list(get_args(item)), default=value or [], help=help_text, key=key)
        text = st.text_input(label, ", ".join(map(str, value or [])), help=f"{help_text} (comma separated)", key=key)
        return [part.strip() for part in text.split(",") if part.strip()]
    if get_origin(ann) is dict:  # name -> number maps (evolution.operators.*, evolution.strength)
        text = st.text_input(label, ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                                              for k, v in (value or {}).items()),
                             help=f"{help_text} (comma separated name=value pairs; empty = none)", key=key)
        return parse_mapping(text)
    if ann is bool:
        return st.checkbox(label, bool(value), help=help_text, key=key)
    if ann in (int, float) and not optional:
        number = ann(value if value is not None else 0)
        kwargs = {"step": 1} if ann is int else {"format": "%g", "step": None}
        return st.number_input(label, value=number, help=help_text, key=key, **{k: v for k, v in kwargs.items() if v is not None})
    text = st.text_input(label, "" if value is None else str(value), help=help_text + (" (empty = none)" if optional else ""), key=key)
    return None if optional and not text.strip() else text


def parse_mapping(text: str) -> dict[str, Any] | str:
    """``"a=1, b=0.5"`` -> ``{"a": 1.0, "b": 0.5}`` (a value that is not a number stays text: the schema names it);
    text that is not such pairs comes back as it is, so the schema's error names the field.

    >>> parse_mapping("gaussian=1, mask = 0.5"), parse_mapping(""), parse_mapping("gaussian"), parse_mapping("mask=x")
    ({'gaussian': 1.0, 'mask': 0.5}, {}, 'gaussian', {'mask': 'x'})
    """
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not all("=" in part for part in parts):
        return text
    return {k.strip(): _number(v.strip()) for k, v in (part.split("=", 1) for part in parts)}


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def nest(flat: dict[str, Any]) -> dict:
    """{"a.b": 1} -> {"a": {"b": 1}}"""
    out: dict = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def get_path(data: dict, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else None
    return data


def _override_lines(overrides: str) -> list[str]:
    return [line.strip() for line in overrides.splitlines() if line.strip() and not line.strip().startswith("#")]


def validate(flat: dict[str, Any], overrides: str = "", schema: type[BaseModel] = TrainConfig) -> tuple[Any, dict[str, str]]:
    """(config, {}) or (None, {dotted field or "": message}); ``overrides`` holds ``key=value`` lines; ``schema``:
    the config the form is generated from (``TrainConfig`` on the Launch page, ``EvalConfig`` for evaluations).

    Every error at once: a bad override line does not hide the fields' own errors (the valid lines are applied
    and the fields validated all the same)."""
    data = nest(flat)
    errors: dict[str, str] = {}
    bad_lines = []
    for line in _override_lines(overrides):
        try:
            key_path, value = config_io.parse_override(line)
            config_io.apply_override(data, key_path, value, schema)
        except config_io.ConfigError as err:
            bad_lines.append(str(err))
    if bad_lines:
        errors["overrides"] = "\n\n".join(bad_lines)
    try:
        cfg = schema.model_validate(data)
    except ValidationError as err:
        return None, {**_errors_by_field(err, flat), **errors}
    return (None, errors) if errors else (cfg, {})


def shadowed(flat: dict[str, Any], overrides: str) -> dict[str, tuple[Any, Any]]:
    """{field: (form value, override value)} for each override line that sets a form field to another value: the
    override wins, so the form no longer shows what will run.

    >>> shadowed({"steps": 4, "name": "smoke"}, "steps=2\\nname=smoke\\nmodel.tiny_random=true")
    {'steps': (4, 2)}
    """
    out = {}
    for line in _override_lines(overrides):
        try:
            key_path, value = config_io.parse_override(line)
        except config_io.ConfigError:
            continue
        path = ".".join(key_path)
        if path in flat and flat[path] != value:
            out[path] = (flat[path], value)
    return out


def run_name(name: str, preset_name: str, changes: list[str], taken: set[str]) -> str:
    """A run name that tells launched runs apart: a name left as the preset's gets what was changed (overrides
    first); a name already used in the store gets ``#2``, ``#3``...

    >>> run_name("smoke", "smoke", ["steps=2", "model.tiny_random=true"], set())
    'smoke steps=2 model.tiny_random=true'
    >>> run_name("smoke", "smoke", [], {"smoke", "smoke #2"})
    'smoke #3'
    >>> run_name("mine", "smoke", ["steps=2"], set())
    'mine'
    """
    if name == preset_name and changes:
        name = f"{name} {' '.join(changes)}"
        name = name if len(name) <= 80 else name[:79] + "…"
    candidate, i = name, 2
    while candidate in taken:
        candidate, i = f"{name} #{i}", i + 1
    return candidate


def changes(flat: dict[str, Any], preset: dict, overrides: str) -> list[str]:
    """``key=value`` of the override lines, then of the form fields that differ from the preset (name aside).

    >>> changes({"name": "x", "steps": 2, "seed": 0}, {"name": "smoke", "steps": 4, "seed": 0}, "model.tiny_random=true")
    ['model.tiny_random=true', 'steps=2']
    """
    out = [line.replace(" ", "") for line in _override_lines(overrides)]
    set_by_override = {line.split("=", 1)[0] for line in out}
    for path, value in flat.items():
        if path != "name" and path not in set_by_override and get_path(preset, path) != value:
            out.append(f"{path}={value}")
    return out


def _errors_by_field(err: ValidationError, flat: dict) -> dict[str, str]:
    errors: dict[str, str] = {}
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"] if not isinstance(p, int))
        message = e["msg"].removeprefix("Value error, ")
        if not field:  # a cross-field check: attach it to every field its message names
            named = [p for p in flat if re.search(rf"\b{re.escape(p)}\b", message)]
            for p in named or [""]:
                errors[p] = message
        else:
            errors[field] = f"{message} (got {e.get('input')!r})" if not isinstance(e.get("input"), dict) else message
    return errors
