"""Maps the top-level folders onto the namespaced `cosim` package.

api/ -> cosim, hub/ -> cosim.hub, adapters/ -> cosim.adapters and
stubs/cosim/v1 -> cosim.v1 (so the generated `from cosim.v1 import ...`
lines resolve unedited). Everything else is in pyproject.toml.
"""

import json
import os
import runpy
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOTS = {"cosim": "api", "cosim.hub": "hub", "cosim.adapters": "adapters", "cosim.v1": "stubs/cosim/v1"}

package_dir = dict(ROOTS)
packages = list(ROOTS)
for name, folder in ROOTS.items():
    # Namespace discovery: folders of data alone (roofline profiles, regression artifacts) are
    # packages too, so that setuptools ships them without warning that they are left out.
    for sub in find_namespace_packages(folder, exclude=["*__pycache__*"]):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

# Data files of every package (presets, roofline profiles, regression artifacts, stub types, build scripts).
DATA = ["*.pyi", "*.yaml", "*.json", "*.jsonl", "*.csv", "*.md", "*.sh", "LICENSE*", "py.typed"]


def package_data(folder: str) -> list[str]:
    """DATA, and every file below a subfolder whose name holds a dot (a model's config under
    ``llama-3.1-70b-instruct/``): discovery cannot name such a folder a package, so its parent ships it."""
    dotted = [sub.name for sub in Path(folder).iterdir() if sub.is_dir() and "." in sub.name]
    return DATA + [f"{name}/**/{pattern}" for name in dotted for pattern in DATA]


def native_extensions() -> list:
    """mypyc's extensions of hub/native.py's NATIVE modules, named as installed (cosim.hub....).

    They are compiled through the links `make lint` type-checks through (build/typecheck/cosim), as
    the folders are not named so; the sources' hashes are recorded for the check at import.
    """
    from mypyc.build import mypycify  # only a native build needs mypy: pip install --no-build-isolation

    native = runpy.run_path("hub/native.py")
    tree = Path("build/typecheck/cosim")
    tree.mkdir(parents=True, exist_ok=True)
    for name, folder in {"__init__.py": "api/__init__.py", "hub": "hub", "adapters": "adapters",
                         "v1": "stubs/cosim/v1"}.items():
        if not (tree / name).is_symlink():
            (tree / name).symlink_to(Path("../../..", folder))
    Path(native["BUILD_RECORD"]).write_text(json.dumps(native["source_hashes"](Path(".")), indent=1) + "\n")
    return mypycify([str(tree / path) for path in native["NATIVE"]], group_name="cosim.hub.native")


setup(packages=packages, package_dir=package_dir,
      package_data={name: package_data(folder) for name, folder in package_dir.items()},
      ext_modules=native_extensions() if os.environ.get("COSIM_NATIVE") == "1" else [])
