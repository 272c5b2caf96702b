"""``/debug/decisions``' memory: the latest answer the extender gave kube-scheduler for
each of the most recently scored pods (:class:`Decisions`), kept as the JSON document sent,
bounded in pods and in node scores; and what explains an answer (:func:`held_bytes`: per
node the pod's bytes it held and needed).
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import msgspec
import numpy as np

from layersched.core.indexstorage import IndexArray
from layersched.core.layerindex import LayerIndex
from layersched.core.objects import ObjectMeta, pod_name
from layersched.core.strategies import NodeScores
from layersched.extender._wire import HostPriority

#: Answers kept for ``/debug/decisions`` (the latest per pod; the oldest pods go first),
#: and the node scores they may hold in all (about 120 bytes each with the node's held
#: and needed bytes: at 5,000 nodes that is the latest 20 pods, 12 MB; on a small
#: cluster the pod count is the bound).
MAX_DECISIONS = 1_024
MAX_DECISION_SCORES = 100_000


class Decision(msgspec.Struct, frozen=True):
    """One ``/prioritize`` answer, as kube-scheduler received it.

    Held compactly, as the JSON document sent (one allocation), not as a list of 5,000
    answer objects and the request's 5,000 name strings. Those were
    200,000 small objects for the latest 20 pods, made anew by every request; the few
    made during a flood of large objects outlived it and kept the allocator's memory
    from going back to the system (docs/inventory.md, "Freed memory").
    """

    pod: str
    uid: str
    #: Seconds since the epoch when it was answered.
    at_s: float
    #: ``NodeNames`` (the held inventory) or ``Nodes`` (the request's nodes).
    mode: str
    #: Why every score is 0 (``not_ready``, ``pod_unresolved``, ``overloaded``), or "".
    neutral: str
    #: The answer as kube-scheduler received it: a JSON array of ``{Host, Score}``.
    answer: bytes
    #: The nodes in ``answer``.
    nodes: int
    #: The strategy that scored it, and per node of the answer (same order) the bytes of
    #: the pod the node held and the pod's bytes (its strategy's own measure: for
    #: image-locality the spread-scaled image sizes and the upper threshold); empty when
    #: neutral. 8 bytes an entry (``array``), not a Python int each.
    strategy: str = ""
    present_bytes: array[int] = msgspec.field(default_factory=lambda: array("q"))
    total_bytes: array[int] = msgspec.field(default_factory=lambda: array("q"))

    def hosts(self) -> list[HostPriority]:
        hosts: list[HostPriority] = _ANSWER.decode(self.answer)
        return hosts

    def scores(self) -> dict[str, int]:
        return {entry.Host: entry.Score for entry in self.hosts()}

    def held(self) -> dict[str, dict[str, int]]:
        """``{node: {"present_bytes", "total_bytes"}}`` (empty for a neutral answer)."""
        return {
            entry.Host: {"present_bytes": present, "total_bytes": total}
            for entry, present, total in zip(
                self.hosts(), self.present_bytes, self.total_bytes, strict=False
            )
        }


_ANSWER = msgspec.json.Decoder(list[HostPriority])
_ENCODER = msgspec.json.Encoder()


#: What a scored answer adds to its Decision: the strategy, and per node the held and
#: needed bytes.
Held = tuple[str, "array[int]", "array[int]"]


class Decisions:
    """The latest answer for each of the ``max_pods`` most recently scored pods, so an
    operator (or the testbed) can ask what the extender told kube-scheduler about a pod.
    Recording keeps a reference to the answer already built: nothing is copied."""

    def __init__(
        self, max_pods: int = MAX_DECISIONS, max_scores: int = MAX_DECISION_SCORES
    ) -> None:
        self._by_pod: OrderedDict[str, Decision] = OrderedDict()
        self._max_pods = max_pods
        self._max_scores = max_scores
        self._scores = 0

    def record(
        self,
        meta: ObjectMeta,
        mode: str,
        answer: list[HostPriority],
        neutral: str = "",
        held: Held | None = None,
    ) -> msgspec.Raw:
        """Remember ``answer`` for the pod of ``meta`` (with ``held``: the strategy and each
        node's held and needed bytes, in ``answer``'s order); returns ``answer`` encoded
        (the server sends it as is: it is encoded once)."""
        key = pod_name(meta)
        earlier = self._by_pod.pop(key, None)
        if earlier is not None:
            self._scores -= earlier.nodes
        strategy, present, total = held if held is not None else ("", array("q"), array("q"))
        encoded = _ENCODER.encode(answer)
        self._by_pod[key] = Decision(
            key,
            meta.uid,
            time.time(),
            mode,
            neutral,
            encoded,
            len(answer),
            strategy=strategy,
            present_bytes=present,
            total_bytes=total,
        )
        self._scores += len(answer)
        # the newest answer stays even when it alone is over the score budget
        while len(self._by_pod) > 1 and (
            len(self._by_pod) > self._max_pods or self._scores > self._max_scores
        ):
            _, oldest = self._by_pod.popitem(last=False)
            self._scores -= oldest.nodes
        return msgspec.Raw(encoded)

    def get(self, pod: str) -> Decision | None:
        return self._by_pod.get(pod)

    def pods(self) -> list[str]:
        """The pods held, most recent last."""
        return list(self._by_pod)


def held_bytes(
    strategy: str,
    names: Sequence[str],
    index: LayerIndex,
    result: NodeScores,
    totals: IndexArray,
    missing: Sequence[str],
) -> Held:
    """Per node of the answer (``names``' order) the bytes held and needed, for
    ``/debug/decisions``; a node unknown to the inventory holds nothing of nothing."""
    present, needed = result.present_bytes, totals
    if missing:
        at = {idx: i for i, idx in enumerate(result.nodes.tolist())}
        present = np.zeros(len(names), dtype=np.int64)
        needed = np.zeros(len(names), dtype=np.int64)
        for i, idx in enumerate(map(index.index_of, names)):
            row = at.get(idx) if idx is not None else None
            if row is not None:
                present[i], needed[i] = result.present_bytes[row], totals[row]
    held_bytes, total_bytes = array("q"), array("q")
    held_bytes.frombytes(np.ascontiguousarray(present, dtype=np.int64).tobytes())
    total_bytes.frombytes(np.ascontiguousarray(needed, dtype=np.int64).tobytes())
    return strategy, held_bytes, total_bytes
