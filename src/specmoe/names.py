"""Names the pipeline derives from the configuration's: a tiny target's untrained control."""

CONTROL_SUFFIX = "-random"


def control_name(target: str) -> str:
    """The untrained control of a tiny target: the same architecture, initialised and not trained
    (the routing baseline every trained target is set beside)."""
    return target + CONTROL_SUFFIX
