"""The kubelet's and kube-scheduler's Events, as every release writes them, and as a
hostile client with the right to create Events could write them."""

from __future__ import annotations

from typing import Any

import pytest

from layersched.core.errors import InputError
from layersched.core.events import (
    event_time_s,
    go_duration_seconds,
    parse_pull_event,
    parse_time_s,
    reporting_host,
    scheduled_event,
)

IMG = "10.250.50.1:5000/scenario/img1:v1"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # kubelet <= 1.18: no duration at all: a pull, untimed
        (f'Successfully pulled image "{IMG}"', (IMG, None, True, None, None)),
        # 1.19-1.25 (the testbed's 1.20): the raw Go duration, waiting included
        (
            f'Successfully pulled image "{IMG}" in 19.62886614s',
            (IMG, 19.62886614, True, None, None),
        ),
        # 1.26-1.29 (kubernetes#111772): the pull, then with the wait for the pull slot
        (
            f'Successfully pulled image "{IMG}" in 1.5s (2m3s including waiting)',
            (IMG, 1.5, True, 123.0, None),
        ),
        # 1.30+ (kubernetes#121719): and the image size as the runtime reports it
        (
            f'Successfully pulled image "{IMG}" in 850ms (1.1s including waiting). '
            "Image size: 46154105 bytes.",
            (IMG, 0.85, True, 1.1, 46154105),
        ),
        # IfNotPresent on a node holding it: nothing pulled
        (f'Container image "{IMG}" already present on machine', (IMG, 0.0, False, None, None)),
        # 1.33+ with KubeletEnsureSecretPulledImages appends a clause
        (
            f'Container image "{IMG}" already present on machine and can be accessed by the pod',
            (IMG, 0.0, False, None, None),
        ),
    ],
    ids=["k8s-1.18", "k8s-1.20", "k8s-1.26", "k8s-1.30", "present", "present-1.33"],
)
def test_every_releases_pull_message(message: str, expected: tuple[Any, ...]) -> None:
    event = parse_pull_event(message)
    assert event is not None
    image, seconds, pulled, waited, size = expected
    assert (event.image, event.pulled, event.size_bytes) == (image, pulled, size)
    assert event.seconds == (None if seconds is None else pytest.approx(seconds))
    assert event.waited_seconds == (None if waited is None else pytest.approx(waited))


@pytest.mark.parametrize(
    "message",
    [
        f'Pulling image "{IMG}"',  # another event of the same pod
        f"Successfully pulled image {IMG} in 1s",  # no quotes
        f'Successfully pulled image "{IMG}" in fast',  # a word for a duration
        f'Successfully pulled image "{IMG}" in -1s',  # a negative duration
        f'Successfully pulled image "{IMG}" in 1.5ss',  # a unit repeated
        f'Successfully pulled image "{IMG}" in 1s. Image size: 1{"0" * 30} bytes.',  # 31 digits
        f'Successfully pulled image "{IMG}" in 1s; rm -rf /',  # trailing junk
        f'Successfully pulled image "{IMG}" in {"1h" * 5000}s',  # a 10 KB "duration"
        "",
        "Successfully pulled image " + '"' * 100_000,  # 100 KB of quotes
    ],
    ids=[
        "pulling",
        "unquoted",
        "word",
        "negative",
        "double-unit",
        "absurd-size",
        "trailing",
        "huge-duration",
        "empty",
        "quotes",
    ],
)
def test_odd_messages_are_no_pull(message: str) -> None:
    assert parse_pull_event(message) is None


def test_a_long_duration_is_refused_before_the_regex_runs() -> None:
    with pytest.raises(InputError, match="Go duration"):
        go_duration_seconds("1h" * 10_000)


@pytest.mark.parametrize(
    ("event", "first", "last"),
    [
        # core/v1 from the kubelet: first and last seen, second resolution
        (
            {"firstTimestamp": "2026-11-24T01:00:00Z", "lastTimestamp": "2026-11-24T01:00:05Z"},
            1795482000.0,
            1795482005.0,
        ),
        # events.k8s.io: eventTime (micro-time), the series' last observation
        (
            {
                "eventTime": "2026-11-24T01:00:00.250000Z",
                "series": {"lastObservedTime": "2026-11-24T01:00:09.500000Z"},
            },
            1795482000.25,
            1795482009.5,
        ),
        # nothing readable but the object's creation
        (
            {
                "firstTimestamp": "yesterday",
                "metadata": {"creationTimestamp": "2026-11-24T01:00:00Z"},
            },
            1795482000.0,
            1795482000.0,
        ),
        # a stamp without a zone is not guessed
        ({"firstTimestamp": "2026-11-24T01:00:00"}, None, None),
        ({"firstTimestamp": 12}, None, None),
    ],
    ids=["core-v1", "events-k8s-io", "creation", "naive", "not-text"],
)
def test_event_times(event: dict[str, Any], first: float | None, last: float | None) -> None:
    assert event_time_s(event) == first
    assert event_time_s(event, last=True) == last


def test_parse_time_refuses_long_text() -> None:
    assert parse_time_s("2026-11-24T01:00:00Z" + " " * 100) is None


def test_the_reporting_kubelet_is_the_node() -> None:
    assert reporting_host({"source": {"component": "kubelet", "host": "n2"}}) == "n2"
    assert reporting_host({"reportingInstance": "n3"}) == "n3"
    assert reporting_host({"source": "n2"}) == ""  # malformed: no node


def test_scheduled_event_names_scheduler_node_and_time() -> None:
    events = [
        {  # an earlier pod of the same name
            "involvedObject": {"uid": "old"},
            "reason": "Scheduled",
            "reportingComponent": "default-scheduler",
            "message": "Successfully assigned ns/p to n9",
            "firstTimestamp": "2026-11-24T00:00:00Z",
        },
        {
            "involvedObject": {"uid": "new"},
            "reason": "Scheduled",
            "reportingComponent": "layer-locality",
            "message": "Successfully assigned ns/p to n2",
            "eventTime": "2026-11-24T01:00:00.5Z",
        },
        {
            "involvedObject": {"uid": "odd"},
            "reason": "Scheduled",
            "source": {"component": "my-scheduler"},
            "message": "[bold]assigned[/bold]",
        },
    ]
    assert scheduled_event(events, "new") == ("layer-locality", "n2", 1795482000.5)
    assert scheduled_event(events, "odd") == ("my-scheduler", "", None)
    assert scheduled_event(events, "none") is None
