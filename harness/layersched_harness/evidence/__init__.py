"""Evidence (harness): where every results file comes from and where a run writes it.

:mod:`~layersched_harness.evidence.provenance` records the commit, date, machine, load and other
processes' cores of a measurement; :mod:`~layersched_harness.evidence.results` writes a run's
results under a run directory, or over the committed files under ``harness/results/`` and
``harness/results/`` only when asked (``LAYERSCHED_RESULTS=commit``), and marks plots with the
commit they draw. Not part of the production wheel or image.
"""
