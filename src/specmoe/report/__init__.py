"""What the report is made of: the table registry and captions (`registry`), the table builders
(`runs`: the runs' tables; `measured`: sweeps and profiles; `replay`: the study's published
inputs), the table writer (`tables`), the figures (`figures`), the sentences computed from the
tables (`prose`) and the HTML page (`html`). The stages that write them are in
`specmoe.stages.report`.
"""
