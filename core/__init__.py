"""What every app of the platform uses, and which depends on none of them: domain errors
(``errors``), numeric bounds read from model fields (``bounds``), id parsing (``ids``), the
bounded JSON reader (``jsonlimits``), live-stream publication (``streams``) and bearer-token
authentication (``auth``). The import contract (``[tool.importlinter]`` in pyproject.toml) keeps
it at the bottom of the layers."""
