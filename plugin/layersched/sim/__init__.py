"""The trace-driven scale simulator: a synthetic image corpus, Poisson/Zipf demand,
nodes with LRU/LFU image stores and shared links, scored by the production strategies.

It calls the same :mod:`layersched.core.strategies` and
:class:`~layersched.core.inventory.ClusterInventory` as the extender, so a
result here is a result for the product. Public entry points:
:func:`~layersched.sim.corpus.generate_corpus` (also used by the benchmarks),
:func:`~layersched.sim.workload.generate_workload`,
:func:`~layersched.sim.engine.simulate` and the named settings in
:mod:`layersched.sim.settings`.
"""
