"""What the measurements say: speedup curves from serving series (`sweep`) and kernel shares from
profiles (`profiling`). Analysis: no engine.
"""
