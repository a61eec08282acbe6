#!/usr/bin/env python
"""Django's command-line utility. A configuration error (settings refuse to load) is one line
and exit 2, not a traceback (gpuplatform/startup.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    from django.core.management import execute_from_command_line

    from gpuplatform.startup import exit_on_configuration_error

    exit_on_configuration_error(lambda: execute_from_command_line(sys.argv))
