"""A scenario's own presets and imported models, beside the built-in ones.

A config may name files that add to the presets::

    presets: my-presets.yaml          # models: [...] and/or devices: [...], as hub/config/presets/*.yaml
    models:
      m: {hf_config: path/to/config.json}   # a Hugging Face config, instead of a preset

:func:`inline_files` reads them when the config is loaded (a relative path
from the config's folder), so a parsed config carries their content and runs
the same wherever it goes (a hub, a sweep worker, a run folder's config.yaml).
:class:`UserPresets` holds a presets file; :func:`find_model` and
:func:`find_device` look names up in it first, then in the built-ins. A user
preset may not reuse a built-in's name or alias: change a built-in's figures
with ``overrides`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import safe_yaml
from ..frozen import FrozenModel
from . import _devices, _models
from .devices import DevicePreset
from .models import ModelPreset
from .registry import PresetRegistry


class UserPresets(BaseModel):
    """Presets a scenario adds: ``presets:`` of the config, its file's content once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str | None = Field(None, description="the file they were read from (for `cosim presets` and errors)")
    models: tuple[ModelPreset, ...] = Field((), description="model presets, as in hub/config/presets/models.yaml")
    devices: tuple[DevicePreset, ...] = Field((), description="device presets, as in hub/config/presets/devices.yaml")

    @model_validator(mode="after")
    def _check_names(self) -> UserPresets:
        problems = [*_clashes("models", self.models, _models()), *_clashes("devices", self.devices, _devices())]
        for kind, entries in (("model", self.models), ("device", self.devices)):
            try:
                PresetRegistry(kind, entries)
            except ValueError as err:
                problems.append(str(err))
        if problems:
            raise ValueError("; ".join(problems))
        return self


class HfConfigFile(FrozenModel):
    """A Hugging Face config.json a model is imported from (:func:`.hf.from_hf_config`)."""

    file: str | None = Field(None, description="the path it was read from")
    config: dict[str, Any] = Field(description="its content")


class ModelConfig(FrozenModel):
    """A served model: a preset or a Hugging Face config.json, optionally with fields overridden."""

    preset: str | None = Field(None, description="model preset name, e.g. meta-llama/Meta-Llama-3-8B "
                                                 "(see `cosim presets models`)")
    hf_config: HfConfigFile | None = Field(
        None, description="path of a Hugging Face config.json to import the model from, instead of a preset")
    dtype: Literal["fp16", "bf16", "fp8", "int8", "fp32"] = Field("fp16", description="weight and compute dtype")
    overrides: dict[str, float | int | bool] = Field(
        default_factory=dict, description="ModelSpec fields to override, e.g. {num_layers: 40}")

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.preset is None) == (self.hf_config is None):
            raise ValueError("give exactly one of preset, hf_config")
        return self


class HardwareConfig(FrozenModel):
    """A device type: a preset, optionally with figures overridden."""

    preset: str = Field(description="device preset name, e.g. H100-SXM")
    overrides: dict[str, float] = Field(
        default_factory=dict,
        description="HardwareSpec figures to override (peak_tflops, mem_bandwidth_gbps, mem_capacity_bytes, "
                    "intra_node_gbps, inter_node_gbps) or extra keys a backend reads")
    price_per_hour_usd: float | None = Field(None, ge=0, description="device price per hour; default from the preset")


def _clashes(key: str, entries: Iterable[ModelPreset | DevicePreset], builtin: PresetRegistry[Any]) -> list[str]:
    found = []
    for i, preset in enumerate(entries):
        for name in (preset.name, *preset.aliases):
            try:
                other = builtin.get(name)
            except KeyError:
                continue
            found.append(f"{key}[{i}]: {name!r} is the built-in preset {other.name!r}; give yours another name "
                         f"(or change the built-in's figures with overrides in the scenario)")
    return found


def find_model(user: UserPresets | None, name: str) -> ModelPreset:
    """The model preset ``name``: the scenario's own first, then the built-ins.

    Raises:
        UnknownPreset: neither has it; the message suggests close names of both.
    """
    if user is None or not user.models:
        return _models().get(name)
    return PresetRegistry("model", (*user.models, *_models().presets())).get(name)


def find_device(user: UserPresets | None, name: str) -> DevicePreset:
    """The device preset ``name``: the scenario's own first, then the built-ins.

    Raises:
        UnknownPreset: neither has it; the message suggests close names of both.
    """
    if user is None or not user.devices:
        return _devices().get(name)
    return PresetRegistry("device", (*user.devices, *_devices().presets())).get(name)


def _read(path: Path) -> Any:
    """A JSON (``.json``) or YAML file's content; ValueError saying why it cannot be had."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else safe_yaml.load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        # Where, not the text: a hub reads these from its own folders too (see cosim.hub.config.quoting).
        what = str(err) if isinstance(err, json.JSONDecodeError) else safe_yaml.describe(err)
        raise ValueError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {what}") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply") from None


def inline_files(data: dict[str, Any], folder: Path) -> list[tuple[str, str]]:
    """Replaces the file paths of ``presets`` and ``models.<m>.hf_config`` in a raw config by
    the files' content, read from ``folder`` when relative; returns (where, problem) pairs."""
    problems: list[tuple[str, str]] = []
    if isinstance(data.get("presets"), str):
        path = folder / data["presets"]
        try:
            content = _read(path)
            if not isinstance(content, dict) or not set(content) <= {"models", "devices"}:
                raise ValueError(f"{path} must be a mapping with models: and/or devices: lists")
            data["presets"] = {"file": data["presets"], **content}
        except ValueError as err:
            problems.append(("presets", str(err)))
    models = data.get("models")
    for name, model in (models.items() if isinstance(models, dict) else ()):  # else the config check says why
        if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
            try:
                content = _read(folder / model["hf_config"])
                if not isinstance(content, dict):
                    raise ValueError(f"{model['hf_config']} is not a JSON object")
                model["hf_config"] = {"file": model["hf_config"], "config": content}
            except ValueError as err:
                problems.append((f"models.{name}.hf_config", str(err)))
    return problems
