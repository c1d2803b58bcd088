"""What a step costs: the roofline cost model (`costmodel`), the step model (`stepmodel`) and its
predictions (`predictor`, `specmoe predict`), model shapes from config.json (`hfconfig`), the
weight model (`weights`) and the GPU plan (`plan`). Analysis: no engine.
"""
