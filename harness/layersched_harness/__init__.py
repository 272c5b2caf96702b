"""layersched's harness: the testbeds that run the product on a real cluster
(:mod:`layersched_harness.testbed`), the scale simulator (:mod:`layersched_harness.sim`)
and the provenance every committed result carries (:mod:`layersched_harness.evidence`).

It imports the product (``layersched``); the product never imports it. It ships in no
wheel or image: a checkout's ``make venv`` installs it (``harness/pyproject.toml``)."""
