"""gpuagent: the gpuplatform node agent. It runs on every GPU node, reads NVML (or a simulated
source) and ships per-GPU samples to the platform's telemetry API. Standard library only, plus
``nvidia-ml-py`` on GPU nodes (the ``nvml`` extra), so it installs without the platform."""
