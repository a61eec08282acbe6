"""gpuctl: the command-line client of gpuplatform. It talks to the REST API over HTTP only (no
Django import), so it installs and runs on any laptop with Python and httpx."""

__version__ = "0.1.0"
