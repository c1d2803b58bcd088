"""How the no-SD points of an SD serving series were taken beside its SD points, in words: one
description per arm order (specmoe.runtime.serving.arm_order decides it). The sweep records it
(paired_no_sd.arm_order and .order, specmoe.stages.measure) and the speedup gives it as its
no_sd_series (specmoe.stages.analysis); the report's opening words each by its first words
("interleaved", "in blocks": specmoe.report.prose). Analysis: no engine.
"""

from __future__ import annotations

# arm order (runtime.serving INTERLEAVED, BLOCKS) -> how the no-SD points were taken
PAIR_ORDER = {
    "interleaved": "interleaved with the SD points: each (repeat, dataset, batch) point measured "
                   "with and without SD back to back, the order alternating from one point to "
                   "the next (AB BA AB ...) and, for each (dataset, batch), from one repeat to "
                   "the next",
    "blocks": "in blocks: every SD point, then every no-SD point, one engine at a time in the "
              "same job (the two sides of a point not adjacent in time)"}
