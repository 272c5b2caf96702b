"""The trace-driven scale simulator: a synthetic image corpus, Poisson/Zipf demand,
nodes with LRU/LFU image stores and shared links, scored by the production strategies.

It places pods with the extender's own :mod:`layersched.core.strategies`
(same classes, same options, bandwidth read from the same node label). They
score a mutable :class:`~layersched.core.inventory.ClusterInventory` here and
a read-only :class:`~layersched.core.snapshot.NodeSnapshot` in the extender;
the two answer every query identically (``tests/unit/test_snapshot.py``), and
the ``scale`` setting times decisions on a ``NodeSnapshot``. Public entry points:
:func:`~layersched.sim.corpus.generate_corpus` (also used by the benchmarks),
:func:`~layersched.sim.workload.generate_workload`,
:func:`~layersched.sim.engine.simulate` and the named settings in
:mod:`layersched.sim.settings`.
"""
