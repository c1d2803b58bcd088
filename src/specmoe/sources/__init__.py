"""Where the inputs come from: the Hugging Face Hub (`hub`), the study's datasets (`studydata`),
prompt tables (`prompts`) and the study's published numbers (`published`, package data).
"""
