"""What the documentation and the deployment files say about settings is what the code reads.

An operator learns the settings and commands from README.md and docs/*.md and sets variables in
docker/.env; a setting read by gpuplatform/settings.py or a manage.py command that no document
names cannot be found, and a variable of docker/.env.example that docker/compose.yaml never
interpolates is silently dropped: Compose hands the containers only the variables its
`environment:` blocks name (DJANGO_HSTS_SECONDS=0 in docker/.env once left HSTS on)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def example_env_names() -> list[str]:
    text = (ROOT / "docker" / ".env.example").read_text()
    return re.findall(r"^([A-Z][A-Z0-9_]*)=", text, re.MULTILINE)


def test_every_variable_of_the_example_env_reaches_the_compose_stack():
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    names = example_env_names()
    assert "DJANGO_SECRET_KEY" in names
    dropped = [name for name in names if not re.search(r"\$\{" + name + r"[:}-]", compose)]
    assert not dropped, f"docker/.env.example sets what compose.yaml never passes on: {dropped}"


def settings_env_names() -> set[str]:
    text = (ROOT / "gpuplatform" / "settings.py").read_text()
    return set(re.findall(r"\benv(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]*)\"", text))


def test_every_setting_read_from_the_environment_is_named_in_a_document():
    names = settings_env_names()
    assert {"DATABASE_URL", "SCHEDULER_CYCLE_SECONDS", "NOTIFY_MAX_ATTEMPTS"} <= names
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    unnamed = sorted(name for name in names if not re.search(rf"\b{name}\b", docs))
    assert not unnamed, f"settings.py reads what no document names: {unnamed}"


def test_every_management_command_is_named_in_a_document():
    commands = sorted(
        p.stem
        for p in ROOT.glob("*/management/commands/*.py")
        if not p.stem.startswith("_") and ".venv" not in p.parts
    )
    assert "seed_demo" in commands
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
    unnamed = [name for name in commands if not re.search(rf"\b{name}\b", docs)]
    assert not unnamed, f"manage.py commands no document names: {unnamed}"
