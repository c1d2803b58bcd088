# Tiny models built on this CPU: tokenizer and corpora, trained targets and drafters, untrained
# controls, and the speculative-vs-plain decoding check on a real vLLM engine.


# Its contract: specmoe.contracts.models.TokenizerParams. It and the trainings start before
# any job that could wait (every engine job waits for them): the scheduler otherwise ran the
# synthetic traces first and started the tokenizer 105 s into a default run.
rule tokenizer:
    output:
        dir=directory(P.TOKENIZER),
    log:
        P.log_of(P.TOKENIZER),
    benchmark:
        P.benchmark_of(P.TOKENIZER)
    priority: GATE_PRIORITY
    conda:
        "../../envs/models.yaml"
    threads: 2
    params:
        **params_of(TokenizerParams),
    script:
        "../scripts/tokenizer.py"


# Its contract (and random_model's): specmoe.contracts.models.TrainParams.
rule train_model:
    input:
        tokenizer=rules.tokenizer.output[0],
    output:
        dir=directory(P.model("{tiny}")),
    log:
        P.log_of(P.model("{tiny}")),
    benchmark:
        P.benchmark_of(P.model("{tiny}"))
    wildcard_constraints:
        tiny=one_of([*CFG.tiny_targets, *CFG.tiny_drafters]),
    priority: train_priority
    conda:
        "../../envs/models.yaml"
    threads: train_threads()
    params:
        **params_of(TrainParams),
    script:
        "../scripts/train_model.py"


# An untrained control is made in seconds and read by its capture_control only: it waits with
# the engine jobs (it started before tiny-fine's training and delayed it by 8 s).
use rule train_model as random_model with:
    output:
        dir=directory(P.model(control_name("{tiny}"))),
    log:
        P.log_of(P.model(control_name("{tiny}"))),
    benchmark:
        P.benchmark_of(P.model(control_name("{tiny}")))
    wildcard_constraints:
        tiny=one_of(CFG.tiny_targets),
    priority: ENGINE_PRIORITY
    params:
        **params_of(TrainParams, trained=False),


# Its contract: specmoe.contracts.models.SdCheckParams.
rule sd_check:
    input:
        target=P.model("{model}"),
        drafter=P.model("{drafter}"),
        tiny_prompts=FILES.tiny_prompts(),
    output:
        json=P.SD_CHECK,
    log:
        P.log_of(P.SD_CHECK),
    benchmark:
        P.benchmark_of(P.SD_CHECK)
    priority: ENGINE_PRIORITY
    retries: 1
    conda:
        "../../envs/models.yaml"
    threads: engine_threads("capture")
    resources:
        engine=engine_claim,
    params:
        **params_of(SdCheckParams),
    script:
        "../scripts/sd_check.py"
