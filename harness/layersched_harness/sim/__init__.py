"""The trace-driven scale simulator: a synthetic image corpus, Poisson/Zipf demand,
nodes with LRU/LFU image stores and shared links, scored by the production strategies.

It places pods with the extender's own :mod:`layersched.core.strategies`
(same classes, same options, bandwidth read from the same node label), against the
one :class:`~layersched.core.layerindex.LayerIndex` type: filled node by node
here, as the extender's watch fills it, while the ``scale`` setting times decisions
on a bulk-built (packed) one, as the extender's ``--nodes`` holds it (both forms
answer every query identically: ``tests/unit/test_layer_index.py``). Public entry points:
:func:`~layersched_harness.sim.corpus.generate_corpus` (also used by the benchmarks),
:func:`~layersched_harness.sim.workload.generate_workload`,
:func:`~layersched_harness.sim.engine.simulate` and the named settings in
:mod:`layersched_harness.sim.settings`.
"""
