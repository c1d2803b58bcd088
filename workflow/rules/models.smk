# Tiny models built on this CPU: tokenizer and corpora, trained targets and drafters, untrained
# controls, and the speculative-vs-plain decoding check on a real vLLM engine.


rule tokenizer:
    output:
        directory("results/models/tokenizer"),
    log:
        "logs/models/tokenizer.log",
    benchmark:
        "benchmarks/models/tokenizer.tsv"
    conda:
        "../../envs/models.yaml"
    threads: 2
    params:
        tiny=tiny_params(
            "vocab_size", "heldout_every", "max_train_tokens", "max_heldout_tokens"
        ),
    script:
        "../scripts/tokenizer.py"


rule train_model:
    input:
        "results/models/tokenizer",
    output:
        directory("results/models/{tiny}"),
    log:
        "logs/models/{tiny}.log",
    benchmark:
        "benchmarks/models/{tiny}.tsv"
    wildcard_constraints:
        tiny=one_of(TINY),
    conda:
        "../../envs/models.yaml"
    threads: train_threads()
    params:
        model=lambda w: training_recipe(w.tiny),
        tiny=train_settings(),
        trained=True,
    script:
        "../scripts/train_model.py"


rule random_model:
    input:
        "results/models/tokenizer",
    output:
        directory("results/models/{tiny}-random"),
    log:
        "logs/models/{tiny}-random.log",
    wildcard_constraints:
        tiny=one_of(TINY_TARGETS),
    conda:
        "../../envs/models.yaml"
    threads: train_threads()
    params:
        model=lambda w: training_recipe(w.tiny, trained=False),
        tiny=train_settings(trained=False),
        trained=False,
    script:
        "../scripts/train_model.py"


rule sd_check:
    input:
        target="results/models/{model}",
        drafter="results/models/{drafter}",
    output:
        "results/sd_check/{model}/{drafter}/K{k}/{dataset}.json",
    log:
        "logs/sd_check/{model}/{drafter}/K{k}/{dataset}.log",
    benchmark:
        "benchmarks/sd_check/{model}/{drafter}/K{k}/{dataset}.tsv"
    retries: 1
    conda:
        "../../envs/models.yaml"
    threads: 2
    resources:
        engine=1,
    params:
        sd=config.get("tiny", {}).get("sd_check", {}),
        prompts=CFG.prompts,
    script:
        "../scripts/sd_check.py"
