"""``pip install ./gpuagent`` on its own: a clean virtualenv gets the node agent and nothing
else (standard library only), and the installed ``gpuagent`` ships samples a live platform
stores for the token's node."""

from __future__ import annotations

import pytest

from telemetry.models import GpuSample
from tests.clean_venv import CleanVenv, pristine_copy

pytestmark = pytest.mark.slow


def test_gpuagent_installs_alone_and_reports_to_the_platform(
    node1, agent_token, live_server, tmp_path
):
    venv = CleanVenv(tmp_path / "venv")
    venv.pip("install", pristine_copy("gpuagent", tmp_path))
    assert venv.distributions() == {"gpuagent"}

    shown = venv.run("gpuagent", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--token-file" in shown.stdout

    token_file = tmp_path / "token"
    token_file.write_text(agent_token + "\n")
    token_file.chmod(0o600)
    ran = venv.run(
        "gpuagent",
        "--url",
        live_server.url,
        "--token-file",
        str(token_file),
        "--source",
        "simulated",
        "--gpus",
        "4",
        "--samples",
        "3",
        "--interval",
        "0.1",
        "--flush-seconds",
        "0.2",
    )
    assert ran.returncode == 0, ran.stderr
    assert "12 sent, 0 rejected, 0 dropped, 0 unsent" in ran.stderr
    stored = GpuSample.objects.filter(node=node1)
    assert stored.count() == 12
    assert sorted(set(stored.values_list("gpu_index", flat=True))) == [0, 1, 2, 3]

    no_token = venv.run("gpuagent", "--url", live_server.url, env={"GPUPLATFORM_NODE_TOKEN": ""})
    assert no_token.returncode == 2 and "--url and a token" in no_token.stderr
