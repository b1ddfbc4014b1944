"""README.md's "Using it" runs top to bottom after `make quickstart`, as a new user types it.

The commands and the Python snippet are read from README.md (and the quickstart's from the Makefile), so
that the test follows the README; each run is cut to a few requests without plots (the sequence is what is
tested: folders, flags, redirections), and ``cosim serve``, which serves until stopped, is left out.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cosim
from cosim.hub.cli import main
from tests.paths import REPO

SMALL = ["workload.requests=20", "output.plots=false"]  # for every run of a YAML config
LEFT_OUT = ("cosim serve",)


def using_it() -> str:
    readme = (REPO / "README.md").read_text()
    return readme[readme.index("\n## Using it\n"):readme.index("\n### The scenario config\n")]


def shell_commands() -> list[list[str]]:
    """The ``cosim`` commands of the section's shell block, continuation lines joined, in order."""
    block, = re.findall(r"```sh\n(.*?)```", using_it(), re.S)
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines
            if line.startswith("cosim ") and not line.startswith(LEFT_OUT)]


def quickstart_command() -> list[str]:
    """`make quickstart`'s cosim command line."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^quickstart:.*\n\t(.+)$", makefile, re.M)
    assert recipe is not None
    return shlex.split(recipe.group(1).replace("$(BIN)/", ""))


def cosim_cli(argv: list[str]) -> int:
    """Runs ``cosim ARGS [> FILE]`` in this process, as the shell would; returns its exit code."""
    args, redirect = argv[1:], None
    if ">" in args:
        args, redirect = args[:args.index(">")], args[args.index(">") + 1]
    if args[0] in ("run", "sweep") and any(a.endswith(".yaml") for a in args):
        args += [part for assignment in SMALL for part in ("--set", assignment)]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        try:
            code = main(args)
        except SystemExit as done:  # --help
            code = int(done.code or 0)
    if redirect is not None:
        Path(redirect).write_text(stdout.getvalue())
    return code


def small(api: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, overrides: tuple[str, ...] = (), **kwargs: Any) -> Any:
        return api(*args, overrides=[*overrides, *SMALL], **kwargs)
    return call


@pytest.mark.slow
def test_every_command_and_snippet_of_using_it_works_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    assert cosim_cli(quickstart_command()) == 0
    commands = shell_commands()
    assert len(commands) >= 10 and any("--model" in c for c in commands)
    for argv in commands:
        assert cosim_cli(argv) == 0, shlex.join(argv)
    assert json.loads(Path("q.json").read_text())["requests"]["completed"] == 20
    assert Path("runs/flags/config.yaml").is_file() and Path("runs/compare/compare.csv").is_file()
    snippet, = re.findall(r"```python\n(.*?)```", using_it(), re.S)
    monkeypatch.setattr(cosim, "run", small(cosim.run))
    monkeypatch.setattr(cosim, "sweep", small(cosim.sweep))
    exec(compile(snippet, "README.md (Using it)", "exec"), {})
    assert Path("runs/seed3/summary.json").is_file() and Path("runs/sweep/py/sweep.csv").is_file()
