"""Routing traces and what they say: the trace format (`trace`), overlap statistics (`overlap`),
unique experts (`unique`), the maximum-entropy IPF fit (`ipf`), synthetic traces (`synth`) and
the deconfounded acceptance statistics (`acceptance`). Analysis: no engine.
"""
