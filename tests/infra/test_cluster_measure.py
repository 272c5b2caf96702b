"""The cluster drivers' measurements (layersched_harness.testbed.cluster._measure), on
recorded text.

Event messages and access-log lines below are in the exact formats the kubelet
and the distribution registry print; the drivers never see anything else.
"""

from __future__ import annotations

from typing import Any

import pytest

from layersched.core.errors import InputError
from layersched_harness.testbed.cluster import (
    go_duration_seconds,
    node_reports_image,
    parse_pull_event,
    pull_event_for,
    pulled_bytes,
)

pytestmark = pytest.mark.infra

MIB = 1024 * 1024
IMG1 = "kind-registry:5000/scenario/img1:v1"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1.5s", 1.5),
        ("850ms", 0.85),
        # 1 min + 2.5 s
        ("1m2.5s", 62.5),
        ("1h0m0s", 3600.0),
        ("120us", 0.00012),
    ],
    ids=["seconds", "millis", "minutes", "hours", "micros"],
)
def test_go_duration_seconds(text: str, seconds: float) -> None:
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "1.5", "fast", "1.5 s"], ids=["empty", "no-unit", "word", "space"]
)
def test_go_duration_seconds_rejects(text: str) -> None:
    with pytest.raises(InputError, match="Go duration"):
        go_duration_seconds(text)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # Kubernetes 1.22 (seed 001's kubelet): the raw Go duration ends the message.
        (f'Successfully pulled image "{IMG1}" in 12.345678901s', (IMG1, 12.345678901, True)),
        # 1.28+: a rounded duration, then the time including the wait for the pull slot.
        (
            f'Successfully pulled image "{IMG1}" in 3.2s (3.2s including waiting)',
            (IMG1, 3.2, True),
        ),
        # 1.30+: also the image size.
        (
            f'Successfully pulled image "{IMG1}" in 850ms (1.1s including waiting). '
            "Image size: 25165824 bytes.",
            (IMG1, 0.85, True),
        ),
        # Already cached (IfNotPresent): nothing crossed the link.
        (f'Container image "{IMG1}" already present on machine', (IMG1, 0.0, False)),
    ],
    ids=["k8s-1.22", "k8s-1.28", "k8s-1.30", "already-present"],
)
def test_parse_pull_event(message: str, expected: tuple[str, float, bool]) -> None:
    event = parse_pull_event(message)
    assert event is not None
    assert (event.image, event.pulled) == (expected[0], expected[2])
    assert event.seconds == pytest.approx(expected[1])


def test_parse_pull_event_ignores_other_events() -> None:
    assert parse_pull_event(f'Pulling image "{IMG1}"') is None


def _event(
    uid: str, first_seen: str, message: str, reason: str = "Pulled", name: str = "p1"
) -> dict[str, Any]:
    """A core/v1 Event as the API serves it (JSON field names)."""
    return {
        "metadata": {"name": f"{name}.{uid}", "creationTimestamp": first_seen},
        "involvedObject": {"kind": "Pod", "name": name, "uid": uid},
        "reason": reason,
        "message": message,
        "firstTimestamp": first_seen,
    }


TRIAL1_UID = "0b1d6f2e-trial-1"
TRIAL2_UID = "7c4e9a10-trial-2"
#: Two trials of the same scenario: pod "p1" twice, the first one long gone but its
#: events still listed (events outlive their pods by an hour by default).
EVENTS = [
    _event(TRIAL1_UID, "2025-11-22T03:00:05Z", f'Pulling image "{IMG1}"', reason="Pulling"),
    _event(TRIAL1_UID, "2025-11-22T03:00:30Z", f'Successfully pulled image "{IMG1}" in 25s'),
    _event(TRIAL2_UID, "2025-11-22T03:05:01Z", f'Pulling image "{IMG1}"', reason="Pulling"),
]

TRIAL2_PULLED = _event(
    TRIAL2_UID, "2025-11-22T03:05:06Z", f'Successfully pulled image "{IMG1}" in 4.5s'
)
#: A later report about trial 1's pod (a container restart finding the image cached).
TRIAL1_LATER = _event(
    TRIAL1_UID, "2025-11-22T03:01:00Z", f'Container image "{IMG1}" already present on machine'
)


@pytest.mark.parametrize(
    ("events", "uid", "expected"),
    [
        # Trial 2's pod has not finished its pull: trial 1's event (same name) must not
        # answer for it, or the driver stops waiting at once.
        (EVENTS, TRIAL2_UID, None),
        # Once trial 2's own event arrives, it is the one: 4.5 s, not trial 1's 25 s.
        ([*EVENTS, TRIAL2_PULLED], TRIAL2_UID, 4.5),
        # Trial 1 still finds its own event among the later ones.
        (EVENTS, TRIAL1_UID, 25.0),
        # Listed newest first (the API guarantees no order): the earliest report wins.
        ([TRIAL1_LATER, *reversed(EVENTS)], TRIAL1_UID, 25.0),
    ],
    ids=["same-name-earlier-trial-ignored", "own-event-found", "first-trial", "earliest-first"],
)
def test_pull_event_for(events: list[dict[str, Any]], uid: str, expected: float | None) -> None:
    event = pull_event_for(events, uid)
    if expected is None:
        assert event is None
    else:
        assert event is not None and event.pulled
        assert event.seconds == pytest.approx(expected)


IMG1_DIGEST = "sha256:" + "ab" * 32
#: What a CRI-O node's kubelet reports after pulling IMG1 (repo digest first, then the tag).
REPORTED_IMG1 = {
    "names": [f"kind-registry:5000/scenario/img1@{IMG1_DIGEST}", IMG1],
    "sizeBytes": 45 * MIB,
}


@pytest.mark.parametrize(
    ("images", "image", "expected"),
    [
        # Listed by tag, asked by tag.
        ([REPORTED_IMG1], IMG1, True),
        # Asked by digest: the repo-digest name matches.
        ([REPORTED_IMG1], f"kind-registry:5000/scenario/img1@{IMG1_DIGEST}", True),
        # Same repository, another tag: a different image as far as the pod is concerned.
        ([REPORTED_IMG1], "kind-registry:5000/scenario/img1:v2", False),
        # Img2 shares layers with Img1 but is not Img1.
        ([REPORTED_IMG1], "kind-registry:5000/scenario/img2:v1", False),
        # The kubelet has not refreshed its list yet: nothing reported.
        ([], IMG1, False),
        # CRI-O names Docker Hub images fully; the pod spec may use the short form,
        # and no tag means latest.
        ([{"names": ["docker.io/library/debian:latest"], "sizeBytes": 1}], "debian", True),
        # Another registry's debian is another image.
        ([{"names": ["quay.io/library/debian:latest"], "sizeBytes": 1}], "debian", False),
        # A dangling image the kubelet lists as <none>: ignored, not an error.
        ([{"names": ["<none>@<none>"], "sizeBytes": 1}, REPORTED_IMG1], IMG1, True),
    ],
    ids=[
        "tag", "digest", "other-tag", "other-image", "not-yet",
        "docker-hub-short", "other-registry", "unparsable-name",
    ],
)  # fmt: skip
def test_node_reports_image(images: list[dict[str, Any]], image: str, expected: bool) -> None:
    node = {"metadata": {"name": "w2"}, "status": {"images": images}}
    assert node_reports_image(node, image) is expected


def _line(client: str, method: str, path: str, status: int, size: str) -> str:
    return (
        f'{client} - - [22/Nov/2025:03:00:00 +0000] "{method} {path} HTTP/1.1" {status} {size} '
        '"" "cri-o/1.30.0 go/go1.22.0"'
    )


NODE = "172.18.0.3"
OTHER = "172.18.0.4"
LOG = [
    _line(NODE, "GET", "/v2/", 200, "2"),  # API probe: not image bytes
    _line(NODE, "HEAD", "/v2/scenario/img1/manifests/v1", 200, "0"),
    _line(NODE, "GET", "/v2/scenario/img1/manifests/v1", 200, "1024"),
    _line(NODE, "GET", "/v2/scenario/img1/blobs/sha256:c0", 200, "2048"),  # config
    _line(NODE, "GET", "/v2/scenario/img1/blobs/sha256:l3", 200, str(4 * MIB)),  # L3
    _line(NODE, "GET", "/v2/scenario/img1/blobs/sha256:l1", 404, "19"),  # error body
    _line(OTHER, "GET", "/v2/scenario/img1/blobs/sha256:l1", 200, str(30 * MIB)),
    'time="2025-11-22T03:00:00Z" level=info msg="response completed" http.request.method=GET',
]


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        # manifest 1024 + config 2048 + L3 4 MiB; the /v2/ probe, HEAD and 404 count for nothing.
        (NODE, 1024 + 2048 + 4 * MIB),
        # Another node's pull of L1 is not this node's traffic.
        (OTHER, 30 * MIB),
        # A node that pulled nothing.
        ("172.18.0.9", 0),
    ],
    ids=["node-pulled-l3", "other-node", "silent-node"],
)
def test_pulled_bytes(client: str, expected: int) -> None:
    assert pulled_bytes(LOG, client) == expected
