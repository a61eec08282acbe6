"""``gpuctl`` as a shell script uses it (as ``squeue`` is used): ``--mine`` means the token's
user, and ``ls`` lists what ``--limit`` asks for and ``--json`` says when the list was cut."""

from __future__ import annotations

import json

import pytest


def _token_of(user) -> str:
    from tenants.services import token_create

    _token, raw = token_create(user=user, name="ci")
    return raw


# --- ls --mine ---------------------------------------------------------------------------------


def test_mine_is_the_tokens_user_not_the_name_saved_at_login(
    as_alice, gpuctl, live_server, platform, submit, monkeypatch, cli_config
):
    """``GPUCTL_TOKEN`` overrides the saved login, so ``--mine`` must follow the token: it used
    the saved file's user name (bob's token listed alice's jobs: none he can see, exit 0, so a
    "wait until none of mine is pending" loop ended at once), and without a saved file (CI) it
    refused with exit 2."""
    submit(platform["alice"], name="alices")
    bobs = submit(platform["bob"], name="bobs", team="nlp").json()["id"]
    monkeypatch.setenv("GPUCTL_TOKEN", _token_of(platform["bob"]))

    result = as_alice("ls", "--mine", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == [bobs]

    cli_config.unlink()  # CI: no file at all, only the environment
    monkeypatch.setenv("GPUCTL_URL", live_server.url)
    result = gpuctl("ls", "--mine", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == [bobs]


# --- ls --limit --------------------------------------------------------------------------------


@pytest.fixture
def two_per_page(monkeypatch):
    """The server's largest page, made small enough to cross with a few jobs."""
    from tenants.pagination import BoundedLimitOffsetPagination

    monkeypatch.setattr(BoundedLimitOffsetPagination, "max_limit", 2)


def test_ls_lists_as_many_as_limit_asks_beyond_the_servers_page(
    as_alice, platform, submit, two_per_page
):
    """``--limit 4`` got the server's largest page (1,000 in production, 2 here) and no more."""
    ids = [submit(platform["alice"], name=f"j{i}").json()["id"] for i in range(5)]
    result = as_alice("ls", "--limit", "4", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == ids[::-1][:4]
    table = as_alice("ls", "--limit", "4")
    assert len(table.out.splitlines()) == 1 + 4 + 1, table.out
    assert "(4 of 5 shown; use --limit or filters)" in table.out


def test_ls_json_says_on_stderr_when_the_list_was_cut(as_alice, platform, submit):
    """``ls --json`` printed the first 50 (the default --limit) and nothing else: a script
    cancelling "all my pending jobs" from it silently missed the rest."""
    for i in range(3):
        submit(platform["alice"], name=f"j{i}")
    cut = as_alice("ls", "--limit", "2", "--json")
    assert cut.code == 0, cut.err
    assert len(json.loads(cut.out)) == 2
    assert cut.err == "note: 2 of 3 jobs listed; use --limit or filters for the rest\n"
    whole = as_alice("ls", "--limit", "3", "--json")
    assert (whole.code, whole.err, len(json.loads(whole.out))) == (0, "", 3)
