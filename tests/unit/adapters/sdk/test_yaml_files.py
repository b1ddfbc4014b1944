from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cosim.adapters.sdk import yaml_files

ROOT = Path(__file__).resolve().parents[4]
# The package's data files a run reads at start: the presets and the roofline's profiles.
DATA_FILES = sorted([*(ROOT / "hub" / "config" / "presets").glob("*.yaml"),
                     *(ROOT / "adapters" / "roofline" / "profiles").glob("*.yaml")])


def test_the_data_files_are_found() -> None:
    assert {"devices.yaml", "models.yaml", "fitted.yaml", "varlen.yaml"} <= {path.name for path in DATA_FILES}


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda path: path.name)
def test_a_data_file_reads_the_same_as_with_the_pure_python_loader(path: Path) -> None:
    """The same objects, down to their types and key order (repr tells 1 from 1.0 and True)."""
    text = path.read_text(encoding="utf-8")
    pure = yaml.load(text, Loader=yaml.SafeLoader)
    assert repr(yaml_files.safe_load(text)) == repr(pure)
    assert pure  # not two empty documents
