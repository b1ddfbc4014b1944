"""Where the tests find the repository and the data beside it, named once.

A test that counted directories up from its own file (``Path(__file__).parents[2]``) broke when it
moved to another folder; these names hold wherever a test lives.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # this file is tests/paths.py
EXAMPLES = REPO / "examples"
# The measured data sets (vidur, splitwise, llmservingsim, ...), checked out beside the repository:
# tests that need them skip without them.
SHARED_DATA = REPO.parent / "shared" / "data"
