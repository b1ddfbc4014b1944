"""The files a config names for presets (``presets:``, ``models.<m>.hf_config``), inside the case.

A fuzz case must be able to mutate what such a file holds (a fractional ``num_hidden_layers`` in a
config.json, a negative bandwidth in a presets file), not only its path. :func:`inline` reads the files
into the config in the form the config also accepts inline (``presets: {file, models, devices}``,
``hf_config: {file, config}``: what ``cosim.hub.config.presets.user.inline_files`` makes of them), so
that mutations reach their content as any other field; :func:`write_back` writes each (mutated) content
to a file again and names it by its path before the case is checked, so the run reads it as a user's.
A mutation that retypes the inline form (``file`` not a string, ``config`` gone) is left inline: that
form is checked as it stands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from cosim.hub.config.presets.user import inline_files


def inline(config: dict[str, Any], folder: Path) -> None:
    """Replaces the file paths of ``config``'s presets and hf_config by their content, read from ``folder``.

    Raises:
        ValueError: a file is missing or unreadable (a seed's mistake, not a case's).
    """
    problems = inline_files(config, folder)
    if problems:
        raise ValueError(f"seed files: {problems}")


def write_back(config: dict[str, Any], folder: Path) -> None:
    """Writes the inlined files of ``config`` into ``folder`` and puts their paths back in their place."""
    presets = config.get("presets")
    if isinstance(presets, dict) and isinstance(presets.get("file"), str):
        content = {key: value for key, value in presets.items() if key != "file"}
        path = folder / "presets.yaml"  # not the case's own name for it, which a mutation may have emptied
        path.write_text(yaml.safe_dump(content, allow_unicode=True), encoding="utf-8")
        config["presets"] = str(path)
    models = config.get("models")
    for i, model in enumerate(models.values() if isinstance(models, dict) else ()):
        hf = model.get("hf_config") if isinstance(model, dict) else None
        if isinstance(hf, dict) and isinstance(hf.get("file"), str) and "config" in hf:
            # NaN and the infinities as Python's json writes them (NaN, Infinity): json.loads reads them
            # back, as it would read a config.json a script wrote.
            path = folder / f"config-{i}.json"
            path.write_text(json.dumps(hf["config"]), encoding="utf-8")
            model["hf_config"] = str(path)
