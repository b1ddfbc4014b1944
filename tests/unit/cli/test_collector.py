"""The garbage collector is tuned while a command runs, and left as it was after."""

from __future__ import annotations

import argparse
import gc

import pytest

from cosim.hub import cli
from cosim.hub.cli.collector import YOUNG_THRESHOLD, tuned_collector


def test_tuned_within_and_restored_after() -> None:
    before = gc.get_threshold()
    with tuned_collector():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0  # the heap at the start is frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_restored_when_the_command_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []

    def handler(args: object) -> int:
        seen.append(gc.get_threshold())
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(verbose=0, handler=handler))
    before = gc.get_threshold()
    assert cli.main(["run"]) == 130
    assert seen == [(YOUNG_THRESHOLD, *before[1:])]
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
