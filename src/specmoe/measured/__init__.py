"""What the measurements say: speedup curves from serving series (`sweep`) and kernel shares from
profiles (`profiling`), how a series' no-SD points were taken (`arms`). Analysis: no engine.
"""
