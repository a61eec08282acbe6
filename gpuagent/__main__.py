"""``python -m gpuagent`` runs the same command as the ``gpuagent`` console script."""

from .agent import main

raise SystemExit(main())
