"""docs/config.md is generated from the config models and kept current; every key there says what it is."""

from __future__ import annotations

from cosim.hub.config import reference
from cosim.hub.config.scenario import ScenarioConfig


def test_the_config_reference_is_current() -> None:
    assert reference.DOC.read_text() == reference.render(), \
        "docs/config.md is not current: run python -m cosim.hub.config.reference"


def test_every_section_and_key_of_the_config_is_described() -> None:
    undescribed = []
    for path, model in reference.sections(ScenarioConfig):
        if not (model.__doc__ or "").strip():
            undescribed.append(path)
        for name, field in model.model_fields.items():
            if not field.description and not reference._models(field.annotation):
                undescribed.append(f"{path}.{name}")
    assert undescribed == []


def test_a_union_of_sections_is_listed_once_per_variant() -> None:
    paths = [path for path, _ in reference.sections(ScenarioConfig)]
    assert "workload.arrival (process: poisson)" in paths and "workload.arrival (process: gamma)" in paths
    assert len(paths) == len(set(paths))
