"""The live watch's parts on their own: the votes per node, the trim after a burst, and
the rate-limited warnings of ignored objects (the watch as a whole is tested through
WatchLayerIndexProvider in test_extender_watch*.py)."""

from __future__ import annotations

import logging

import pytest

from layersched.core.layers import Layer
from layersched.core.nodeimages import NodeImage
from layersched.core.votes import ImageVotes
from layersched.extender import _memory
from layersched.extender.watch._ignored import IGNORED_LOG_PERIOD_S, IgnoredLog
from tests.fixtures.fake_kube import digest

NGINX = "nginx:1.25"
REAL = NodeImage.held((NGINX,), digest(100), (Layer(digest(1), 30_000_000),))
OTHER = NodeImage.held((NGINX,), digest(200), (Layer(digest(2), 1),))


# ---------------------------------------------------------------- votes per node
def test_a_nodes_votes_follow_what_it_publishes() -> None:
    votes = ImageVotes(quorum=2)
    n1, n2 = (REAL,), (REAL,)
    votes.vote("n1", "", n1)
    assert votes.layers(NGINX, "") is None  # one node: no quorum
    votes.vote("n2", "", n2)
    assert votes.layers(NGINX, "") == REAL.layers  # two agree
    assert votes.voters == 2
    votes.vote("n2", "", (OTHER,))  # n2 now says otherwise: 1 against 1
    assert votes.layers(NGINX, "") is None
    votes.vote("n2", "", n2)
    assert votes.layers(NGINX, "") == REAL.layers
    votes.vote("n2", "", None)  # n2's object went: its votes with it
    assert (votes.layers(NGINX, ""), votes.voters) == (None, 1)
    votes.vote("n1", "", None)
    assert (votes.voters, len(votes)) == (0, 0)  # nothing kept of either


def test_the_same_images_again_change_nothing() -> None:
    # a node refreshed with the same held tuple (a Node update, its object unchanged)
    # keeps its ballots: no withdrawal and recast
    votes = ImageVotes(quorum=1)
    images = (REAL,)
    votes.vote("n1", "", images)
    tally = {key: dict(answers) for key, answers in votes._tally.items()}
    votes.vote("n1", "", images)
    assert {key: dict(answers) for key, answers in votes._tally.items()} == tally
    votes.vote("n1", "arm64", images)  # another platform: voted under the other key
    assert votes.layers(NGINX, "") is None
    assert votes.layers(NGINX, "arm64") == REAL.layers


# ---------------------------------------------------------------- the trim
@pytest.mark.parametrize(
    ("churned", "expected_trims"),
    [
        # 16 MiB exactly is not "more than" TRIM_AFTER_BYTES: no trim
        ([_memory.TRIM_AFTER_BYTES], 0),
        # one byte more: a trim
        ([_memory.TRIM_AFTER_BYTES + 1], 1),
        # counted from the last trim: +1 byte after it is no burst, +16 MiB+1 again is
        ([_memory.TRIM_AFTER_BYTES + 1, _memory.TRIM_AFTER_BYTES + 2], 1),
        ([_memory.TRIM_AFTER_BYTES + 1, 2 * _memory.TRIM_AFTER_BYTES + 2], 2),
    ],
    ids=["at-the-bound", "past-it", "no-new-burst", "two-bursts"],
)
def test_a_trim_follows_a_burst_only(
    monkeypatch: pytest.MonkeyPatch, churned: list[int], expected_trims: int
) -> None:
    monkeypatch.setattr(_memory, "trim", lambda: True)  # glibc's answer, anywhere
    readings = iter(churned)
    trim = _memory.ChurnTrim(lambda: next(readings))
    for _ in churned:
        trim.check()
    assert trim.trims == expected_trims


# ---------------------------------------------------------------- ignored objects
def test_warnings_of_ignored_objects_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="layersched.extender")
    now_s = [100.0]
    ignored = IgnoredLog(lambda: now_s[0])
    for i in range(5):
        ignored.warn("too_large", f"object {i} is too large")
    ignored.warn("stale", "object 9 is stale")
    assert caplog.messages == ["object 0 is too large", "object 9 is stale"]
    ignored.flush()  # the period has not ended: nothing more yet
    assert len(caplog.messages) == 2
    now_s[0] += IGNORED_LOG_PERIOD_S  # the period ended
    ignored.flush()
    assert caplog.messages[2].startswith("4 more objects (or parts of objects) ignored")
    assert "4 too_large" in caplog.messages[2]
    assert "stale" not in caplog.messages[2]  # one of its kind: logged in full already
