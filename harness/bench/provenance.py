"""Moved to :mod:`layersched_harness.evidence.provenance` (the harness's results files, which the
scenario and the simulator use too). ``import provenance`` from ``harness/bench/`` still finds the
one module: this name is that module, not a copy."""

import sys

from layersched_harness.evidence import provenance

sys.modules[__name__] = provenance
