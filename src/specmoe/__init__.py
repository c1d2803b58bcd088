"""specmoe: speculative decoding on sparse MoE models, measured and modelled.

The library never imports snakemake, vLLM or torch at import time; capture and serving code import
them lazily.
"""

__version__ = "0.1.0"
