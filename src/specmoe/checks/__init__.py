"""Checks before any job runs: the configuration's schema (`schema`) and contradictions
(`configcheck`), and the preflight of every GPU job (`preflight`, with vLLM's own checks in
`vllmcheck`).
"""
