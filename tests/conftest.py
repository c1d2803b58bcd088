import numpy as np
import pytest

from specmoe.synth import SynthParams, generate


@pytest.fixture(scope="session")
def small_trace():
    """A synthetic trace with stickiness, skew and acceptance tied to overlap."""
    return generate(SynthParams(num_experts=32, top_k=4, num_layers=3, k_draft=3, skew=0.7,
                                stickiness=0.4, requests=40, steps=30, accept_prob=0.7,
                                accept_overlap_tie=2.0, categories=["a", "b"], seed=7))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
