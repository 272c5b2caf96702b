"""The node agent's containerd reader against a REAL containerd and docker-registry.

The layers must come from containerd's own content store, equal to what the registry
serves, with no registry call of the agent's; image events must arrive for a pull and a
removal; and a pull (and a removal) must reach the object the agent publishes within
the bound the local e2e holds containerd 1.6 to, through the agent's own read, event
and publish code (the API is a recorder: the real one is in tests/e2e). Each test runs
on containerd 1.6 and on 2.x (``[1.6]``/``[2.1]``, tests/fixtures/containerd.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import tenacity

from layersched.agent import ChangeSignal, NodeImagesReader, Publisher, publish_loop, watch_events
from layersched.containerd import ContainerdClient, ContentStoreReader
from layersched.core.nodelayers import parse_document
from layersched.core.nodelayersbuilder import build_document
from layersched.cri import CRIClient
from tests.fixtures.containerd import RUNTIMES, ContainerdProcess
from tests.fixtures.registry import RegistryProcess
from tests.integration.test_cri import IMG1, IMG2, Pushed, cri, pushed
from tests.unit.test_agent_publisher import RecordingKube

pytestmark = pytest.mark.integration
__all__ = ["cri", "pushed"]  # the fixtures, shared with test_cri

EVENT_TIMEOUT_S = 10.0
POLL_S = 0.05
#: A pull or removal reaches the published inventory within this: the bound the local
#: e2e holds the agent on containerd 1.6 to (tests/e2e/test_local_scenario.py, where it
#: covers the extender's watch as well).
INVENTORY_LAG_BOUND_S = 10.0
#: The agent's fallback poll and resync periods here: longer than the bound, so only an
#: image event can bring a change in within it.
QUIET_PERIOD_S = 60.0
THREAD_STOP_TIMEOUT_S = 5.0


@pytest.fixture
def content(containerd: ContainerdProcess) -> Iterator[ContainerdClient]:
    with ContainerdClient(containerd.endpoint) as client:
        yield client


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_layers_come_from_the_content_store(
    cri: CRIClient, pushed: Pushed, content: ContainerdClient, registry: RegistryProcess
) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    log_lines = len(registry.log_text().splitlines())
    images = {image.digest: image for image in ContentStoreReader(content).images()}
    # one entry per manifest, named by its tag and digest reference (not the ID record)
    assert set(images) == {IMG1.digest, IMG2.digest}
    assert images[IMG1.digest].names == tuple(
        sorted((pushed.img1, pushed.digest_ref(pushed.img1, IMG1)))
    )
    # the layers are the manifest's, base first, with their compressed sizes
    for built in (IMG1, IMG2):
        assert images[built.digest].layers == built.layers
    # and nothing was asked of the registry to find them
    assert len(registry.log_text().splitlines()) == log_lines


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_document_round_trips_and_dedupes(
    cri: CRIClient, pushed: Pushed, content: ContainerdClient
) -> None:
    cri.pull_image(pushed.img1)
    cri.pull_image(pushed.img2)
    document = build_document(
        "n1", ContentStoreReader(content).images(), runtime="containerd", source="content-store"
    )
    # Img1 = L1+L2+L3 and Img2 = L1+L2+L4 share two layers: four distinct ones are listed
    assert len(document["layers"]) == 4
    parsed = parse_document(document, "test")
    assert {i.digest: i.layers for i in parsed.images} == {
        i.digest: i.layers for i in ContentStoreReader(content).images()
    }


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_events_follow_pulls_and_removals(
    cri: CRIClient, pushed: Pushed, containerd: ContainerdProcess
) -> None:
    events = ContainerdClient(containerd.endpoint)
    signal = ChangeSignal()
    topics: list[str] = []

    def recorded() -> Iterator[str]:
        for topic in events.events():
            topics.append(topic)
            yield topic

    watcher = threading.Thread(target=watch_events, args=(recorded, signal, 60.0), daemon=True)
    watcher.start()

    @tenacity.retry(
        stop=tenacity.stop_after_delay(EVENT_TIMEOUT_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def assert_topic(topic: str) -> None:
        assert topic in topics

    try:
        cri.pull_image(pushed.img1)
        assert_topic("/images/create")
        cri.remove_image(pushed.img1)
        assert_topic("/images/delete")
    finally:
        signal.stopped.set()
        events.close()
        watcher.join(timeout=5)


def _published(kube: RecordingKube) -> dict[str, tuple[str, ...]]:
    """What the agent last applied: {manifest digest: image names}."""
    assert kube.applied, "the agent has published nothing yet"
    return {i.digest: i.names for i in parse_document(kube.applied[-1], "applied").images}


@pytest.mark.parametrize("containerd", RUNTIMES, indirect=True)
def test_a_pull_reaches_the_published_inventory(
    cri: CRIClient, pushed: Pushed, containerd: ContainerdProcess
) -> None:
    kube = RecordingKube()
    version = ".".join(map(str, containerd.version))
    publisher = Publisher(kube, "n1", runtime=f"containerd://{version}")  # type: ignore[arg-type]
    store = ContainerdClient(containerd.endpoint)
    events = ContainerdClient(containerd.endpoint)
    topics: list[str] = []

    def recorded() -> Iterator[str]:
        for topic in events.events():
            topics.append(topic)
            yield topic

    signal = ChangeSignal()
    threads = [
        threading.Thread(target=watch_events, args=(recorded, signal, QUIET_PERIOD_S)),
        threading.Thread(
            target=publish_loop,
            args=(NodeImagesReader([ContentStoreReader(store)]).read, publisher, signal),
            kwargs={"resync_s": QUIET_PERIOD_S},
        ),
    ]

    @tenacity.retry(
        stop=tenacity.stop_after_delay(INVENTORY_LAG_BOUND_S),
        wait=tenacity.wait_fixed(POLL_S),
        reraise=True,
    )
    def assert_published(images: dict[str, tuple[str, ...]]) -> None:
        assert _published(kube) == images

    lags_s = {}
    for thread in threads:
        thread.start()
    try:
        assert_published({})  # the empty node, at start
        started = time.monotonic()
        cri.pull_image(pushed.img1)
        # by its tag and its digest reference (the CRI's three records, the ID left out)
        assert_published(
            {IMG1.digest: tuple(sorted((pushed.img1, pushed.digest_ref(pushed.img1, IMG1))))}
        )
        lags_s["pull"] = time.monotonic() - started
        started = time.monotonic()
        cri.remove_image(pushed.img1)
        assert_published({})
        lags_s["removal"] = time.monotonic() - started
    finally:
        signal.stopped.set()
        signal.set()
        events.close()
        for thread in threads:
            thread.join(timeout=THREAD_STOP_TIMEOUT_S)
        store.close()
    # brought in by image events (the fallbacks wait QUIET_PERIOD_S)
    assert "/images/create" in topics and "/images/delete" in topics
    assert all(lag_s <= INVENTORY_LAG_BOUND_S for lag_s in lags_s.values())
    print(
        f"containerd {version}: published after "
        + ", ".join(f"{what} {lag_s:.2f} s" for what, lag_s in lags_s.items())
    )
