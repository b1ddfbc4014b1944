"""Processes as /proc shows them: a process's children, whether it still runs, a session's members."""

from __future__ import annotations

from pathlib import Path


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def session_members(sid: int) -> list[int]:
    """The live processes of session ``sid`` (a process started with ``start_new_session``, and
    whatever it started that did not leave the session)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members
