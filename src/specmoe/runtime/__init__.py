"""The engine side (torch and vLLM, imported lazily; the `cpu` or `gpu` extra): vLLM engines
(`engine`), routing capture (`capture`), serving series (`serving`), kernel profiling
(`kernelprof`) and the tiny models' training (`tiny`).
"""
