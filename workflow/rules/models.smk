# Tiny models built on this CPU: tokenizer and corpora, trained targets and drafters, untrained
# controls, and the speculative-vs-plain decoding check on a real vLLM engine.


rule tokenizer:
    output:
        directory(P.TOKENIZER),
    log:
        P.log_of(P.TOKENIZER),
    benchmark:
        P.benchmark_of(P.TOKENIZER)
    conda:
        "../../envs/models.yaml"
    threads: 2
    params:
        tiny=CFG.tiny_params(
            "vocab_size", "heldout_every", "max_train_tokens", "max_heldout_tokens"
        ),
    script:
        "../scripts/tokenizer.py"


rule train_model:
    input:
        rules.tokenizer.output[0],
    output:
        directory(P.model("{tiny}")),
    log:
        P.log_of(P.model("{tiny}")),
    benchmark:
        P.benchmark_of(P.model("{tiny}"))
    wildcard_constraints:
        tiny=one_of([*CFG.tiny_targets, *CFG.tiny_drafters]),
    conda:
        "../../envs/models.yaml"
    threads: CFG.train_threads
    params:
        model=lambda w: CFG.training_recipe(w.tiny),
        tiny=CFG.train_settings(),
        trained=True,
    script:
        "../scripts/train_model.py"


use rule train_model as random_model with:
    output:
        directory(P.model(control_name("{tiny}"))),
    log:
        P.log_of(P.model(control_name("{tiny}"))),
    benchmark:
        P.benchmark_of(P.model(control_name("{tiny}")))
    wildcard_constraints:
        tiny=one_of(CFG.tiny_targets),
    params:
        model=lambda w: CFG.training_recipe(w.tiny, trained=False),
        tiny=CFG.train_settings(trained=False),
        trained=False,


rule sd_check:
    input:
        target=P.model("{model}"),
        drafter=P.model("{drafter}"),
    output:
        P.SD_CHECK,
    log:
        P.log_of(P.SD_CHECK),
    benchmark:
        P.benchmark_of(P.SD_CHECK)
    retries: 1
    conda:
        "../../envs/models.yaml"
    threads: 2
    resources:
        engine=1,
    params:
        sd=CFG.sd_check,
        prompts=CFG.prompts,
    script:
        "../scripts/sd_check.py"
