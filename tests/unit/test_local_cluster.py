"""The local testbed's cluster backend: what it reads from the testbed's own files.

The registry access log (bytes per pull, counted once the log is quiet), and the score
lines the real kube-scheduler and the extender write.
"""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layersched_harness.testbed.cluster import extender_decision, plugin_scores, scheduled_by
from layersched_harness.testbed.cluster.driver import PodRun
from layersched_harness.testbed.errors import TestbedError
from layersched_harness.testbed.hosts import LocalHost
from layersched_harness.testbed.local._cluster import (
    LAYER_LOCALITY_PLUGIN,
    FileBackend,
    RegistryAccessLog,
    extender_requests,
    file_end,
    lines_since,
)
from tests.fixtures.serving import serving

POD = "layersched-scenario/p1-again"
#: kube-scheduler 1.20's -v=10 line (klog header, then a Go %v of []NodeScore).
SCORES_LINE = (
    "I1122 22:51:30.123456   25067 generic_scheduler.go:504] Plugin ImageLocality scores on "
    "{pod} => [{{n1 0}} {{n3 {score}}}]"
)


@pytest.mark.parametrize(
    ("lines", "plugin", "expected"),
    [
        # the plugin's line for this pod: node -> score as logged (0..100)
        ([SCORES_LINE.format(pod=POD, score=5)], "ImageLocality", {"n1": 0, "n3": 5}),
        # a retried cycle logs again: the last line is the decision that bound the pod
        (
            [SCORES_LINE.format(pod=POD, score=5), SCORES_LINE.format(pod=POD, score=7)],
            "ImageLocality",
            {"n1": 0, "n3": 7},
        ),
        # another pod's line (p1, a prefix of p1-again) is not this pod's
        ([SCORES_LINE.format(pod="layersched-scenario/p1", score=5)], "ImageLocality", None),
        # another plugin's line does not count as ImageLocality's
        ([SCORES_LINE.format(pod=POD, score=5)], "NodeResourcesBalancedAllocation", None),
        ([], "ImageLocality", None),
    ],
    ids=["one-line", "last-wins", "other-pod", "other-plugin", "nothing-logged"],
)
def test_plugin_scores(lines: list[str], plugin: str, expected: dict[str, int] | None) -> None:
    assert plugin_scores(lines, plugin, POD) == expected


DECISION = [
    f"DEBUG layersched.extender: pod {POD} (layer-locality):",
    "  n1: present 0 / total 46150000 bytes -> 0/100 -> 0/10",
    "  n3: present 41950000 / total 46150000 bytes -> 90/100 -> 9/10",
]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # the answer is the last column, s/10, per node
        (DECISION, {"n1": 0, "n3": 9}),
        # lines after the block end it
        ([*DECISION, "INFO layersched.extender: something else"], {"n1": 0, "n3": 9}),
        # a neutral answer for this pod: every node 0, names not logged
        ([f"INFO layersched.extender: pod {POD}: neutral scores for 2 nodes (not_ready)"], {}),
        # a later neutral answer replaces an earlier decision
        (
            [*DECISION, f"INFO x: pod {POD}: neutral scores for 2 nodes (pod_unresolved)"],
            {},
        ),
        # another pod's decision is not this pod's
        ([line.replace(POD, "layersched-scenario/p1") for line in DECISION], None),
    ],
    ids=["decision", "block-ends", "neutral", "later-neutral", "other-pod"],
)
def test_extender_decision(lines: list[str], expected: dict[str, int] | None) -> None:
    assert extender_decision(lines, POD) == expected


def _event(uid: str, reason: str, when: str, **fields: Any) -> dict[str, Any]:
    return {
        "involvedObject": {"uid": uid},
        "reason": reason,
        "firstTimestamp": when,
        **fields,
    }


def test_scheduled_by_reads_the_reporting_controller_of_this_pod_only() -> None:
    events = [
        # an earlier pod with the same name (another uid) was bound by another scheduler
        _event("old", "Scheduled", "2026-11-22T10:00:00Z", reportingComponent="image-locality"),
        _event("new", "Pulled", "2026-11-22T10:01:00Z", reportingComponent="kubelet"),
        _event("new", "Scheduled", "2026-11-22T10:00:59Z", reportingComponent="layer-locality"),
    ]
    assert scheduled_by(events, "new") == "layer-locality"
    assert scheduled_by(events, "missing") is None
    # recorders of the older events API name the component in source.component
    legacy = [_event("u", "Scheduled", "t", source={"component": "default-scheduler"})]
    assert scheduled_by(legacy, "u") == "default-scheduler"


def test_lines_since_reads_only_what_came_after_the_mark(tmp_path: Path) -> None:
    log = tmp_path / "scheduler.log"
    assert file_end(log) == 0
    assert lines_since(log, 0) == []
    log.write_text("before\n")
    mark = file_end(log)
    with log.open("a") as f:
        f.write("after 1\nafter 2\n")
    assert lines_since(log, mark) == ["after 1", "after 2"]


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[tuple[http.server.HTTPServer, str]]:
    with serving(http.server.HTTPServer(("127.0.0.1", 0), _Metrics), "metrics") as server:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"


def test_extender_requests_counts_successful_prioritize_only(
    metrics_server: tuple[http.server.HTTPServer, str],
) -> None:
    _, url = metrics_server
    _Metrics.body = (
        b'layersched_extender_requests_total{code="200",verb="prioritize"} 3.0\n'
        b'layersched_extender_requests_total{code="400",verb="prioritize"} 2.0\n'
        b'layersched_extender_requests_total{code="200",verb="filter"} 7.0\n'
    )
    # 3: the 400s are not answers, filter is another verb
    assert extender_requests(url) == 3


def test_extender_requests_without_an_extender_says_how_to_check() -> None:
    with pytest.raises(TestbedError, match="testbed status"):
        extender_requests("http://127.0.0.1:9")


# ------------------------------------------------------------------- access log
class _LateLog(RegistryAccessLog):
    """A log the registry appends to a little after the pull returned, a line per look.

    Lines appear only at looks at least ``delay_s`` after creation, as when the
    registry finishes writing after the client saw the response; then ``lines`` of
    them, one per look.
    """

    def __init__(self, path: Path, delay_s: float, lines: list[str], **kwargs: float) -> None:
        super().__init__(path, **kwargs)
        self.start = time.monotonic()
        self.delay_s = delay_s
        self.pending = list(lines)

    def mark(self) -> int:
        if self.pending and time.monotonic() - self.start >= self.delay_s:
            with self.path.open("a") as f:
                f.write(self.pending.pop(0))
        return super().mark()


def test_bytes_since_waits_for_lines_written_after_the_pull(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    lines = [
        f'10.0.0.2 - - [t] "GET /v2/a/blobs/sha256:{i} HTTP/1.1" 200 1000 "" "c"\n'
        for i in range(3)
    ]
    log = _LateLog(path, delay_s=0.05, lines=lines, settle_poll_s=0.1, settle_timeout_s=5.0)
    mark = log.mark()  # t=0: nothing yet
    # Two looks microseconds apart would agree on an empty log and count 0 B. Waiting
    # until the log stays put for a whole poll counts all three lines: 3 x 1000 B.
    assert log.bytes_since(mark, "10.0.0.2") == 3000


def test_bytes_since_gives_up_on_a_log_that_keeps_growing(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("")
    line = '10.0.0.2 - - [t] "GET /v2/ HTTP/1.1" 200 10 "" "c"\n'
    log = _LateLog(path, delay_s=0, lines=[line] * 10_000, settle_poll_s=0.01, settle_timeout_s=0.2)
    started = time.monotonic()
    assert not log.wait_settled()
    # Bounded by the named timeout (plus one poll and scheduling slack), then it counts.
    assert time.monotonic() - started < 0.2 + 1.0
    assert log.bytes_since(0, "10.0.0.2") > 0


def test_bytes_since_with_no_log_yet_is_zero(tmp_path: Path) -> None:
    log = RegistryAccessLog(tmp_path / "missing.log", settle_poll_s=0.001)
    assert log.mark() == 0
    assert log.bytes_since(0, "10.0.0.2") == 0


def test_the_plugin_strategys_scores_come_from_its_schedulers_log(tmp_path: Path) -> None:
    # layer-locality-plugin: the LayerLocality line of its own scheduler's -v=10 log, after
    # the mark taken before the pod was created (an earlier pod of the same name is ignored)
    log = tmp_path / "scheduler-layer-locality-plugin.log"
    access = tmp_path / "access.log"
    access.write_text("")
    line = "I1124 generic_scheduler.go:504] Plugin {plugin} scores on " + POD + " => [{scores}]\n"
    log.write_text(line.format(plugin="LayerLocality", scores="{n1 5}"))
    backend = FileBackend(
        "local",
        schedulers={LAYER_LOCALITY_PLUGIN: "layer-locality-plugin"},
        control_plane=LocalHost(),
        access_log=str(access),
        score_logs={LAYER_LOCALITY_PLUGIN: str(log)},
        extender_url="http://127.0.0.1:1",
        nodes={},
    )
    mark = backend.mark()
    with log.open("a") as out:
        out.write(line.format(plugin="ImageLocality", scores="{n1 0} {n3 0}"))
        out.write(line.format(plugin="LayerLocality", scores="{n1 0} {n3 90}"))
    run = PodRun(POD, "uid", LAYER_LOCALITY_PLUGIN, {}, [], [], mark)
    assert backend.scores(run) == {"n1": 0, "n3": 90}
