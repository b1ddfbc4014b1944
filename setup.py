"""Maps the top-level folders onto the namespaced `cosim` package.

api/ -> cosim, hub/ -> cosim.hub, adapters/ -> cosim.adapters and
stubs/cosim/v1 -> cosim.v1 (so the generated `from cosim.v1 import ...`
lines resolve unedited). Everything else is in pyproject.toml.
"""

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
DATA = ["*.pyi", "*.yaml", "*.json", "*.csv", "*.md", "*.sh", "py.typed"]
setup(packages=packages, package_dir=package_dir, package_data={"": DATA})
