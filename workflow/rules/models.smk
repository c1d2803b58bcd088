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
        tiny=tiny_params("vocab_size", "train"),
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
        tiny="|".join(TINY) or "^$",
    conda:
        "../../envs/models.yaml"
    threads: 2
    params:
        model=lambda w: TINY[w.tiny],
        tiny=tiny_params("vocab_size", "train"),
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
        tiny="|".join(TINY_TARGETS) or "^$",
    conda:
        "../../envs/models.yaml"
    threads: 2
    params:
        model=lambda w: TINY[w.tiny],
        tiny=tiny_params("vocab_size", "train"),
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
        prompts=config.get("tiny", {}).get("prompts", "builtin:v1"),
    script:
        "../scripts/sd_check.py"
