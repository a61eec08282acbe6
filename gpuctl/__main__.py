"""``python -m gpuctl`` runs the same command as the ``gpuctl`` console script."""

from .main import main

raise SystemExit(main())
