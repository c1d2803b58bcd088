"""The pipeline's stages: every function a rule's script calls, one module per rule file
(workflow/rules/<name>.smk has its stages in specmoe.stages.<name>).

Each stage takes plain paths and dicts (never Snakemake's objects), calls the library and writes
its outputs atomically with their provenance, so every stage runs and is tested without Snakemake.
The function a rule's script runs takes (inputs, outputs, params) by name: the rule's named files
and its parameters record (specmoe.contracts, which names it).

Runtime (torch / vLLM; the `cpu` or `gpu` extra):
- `models`: tokenizer, train_model, random_model, sd_check
- `traces`: capture
- `measure`: sweep_ar, sweep_sd, profile
- `engines`: what the engine stages share (served checkpoint, timeouts, provenance)
- `study`: download_model, download_dataset, prompt_table (the study's datasets through vLLM's
  dataset readers; the downloads themselves need huggingface_hub only)

Analysis (no engine; the analysis environment):
- `analysis`: synth_fit, synth_trace, overlap, ipf, costmodel, predict, acceptance, speedup
- `report`: tables, measured_tables, step_model, weight_model, plan, replay, comparison,
  figures, report_index (the tables, figures and text come from `specmoe.report`)
"""
