"""The settings' environment reader refuses a value its setting cannot take exactly, naming the
variable; django-environ guessed (``1O`` seconds was 1, ``flase`` was false) or raised a bare
``ValueError``/``KeyError`` traceback."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuplatform.envreader import SettingsEnv


def _env(**values: str) -> SettingsEnv:
    reader = SettingsEnv()
    reader.ENVIRON = values  # the instance reads this mapping instead of os.environ
    return reader


@pytest.mark.parametrize(
    ("kind", "raw", "message"),
    [
        ("int", "abc", "X: 'abc' is not a whole number"),
        ("int", "1.5", "X: '1.5' is not a whole number"),
        ("int", "-3", "X: must not be negative, not -3"),
        ("float", "1O", "X: '1O' is not a number"),
        ("float", "1,5", "X: '1,5' is not a number"),
        ("float", "nan", "X: 'nan' is not a finite number"),
        ("float", "inf", "X: 'inf' is not a finite number"),
        ("float", "-0.5", "X: must not be negative, not -0.5"),
        ("bool", "flase", "X: 'flase' is neither true nor false"),
        ("bool", "disabled", "X: 'disabled' is neither true nor false"),
    ],
)
def test_a_value_the_setting_cannot_take_is_refused_naming_the_variable(kind, raw, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        getattr(_env(X=raw), kind)("X", default=1)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize(
    ("kind", "raw", "value"),
    [
        ("int", " 42 ", 42),
        ("int", "0", 0),
        ("float", "2.5", 2.5),
        ("float", "1e3", 1000.0),
        ("bool", "TRUE", True),
        ("bool", "off", False),
        ("bool", "0", False),
        ("bool", "Yes", True),
    ],
)
def test_a_well_formed_value_is_read(kind, raw, value):
    assert getattr(_env(X=raw), kind)("X", default=None) == value


@pytest.mark.parametrize(("kind", "default"), [("int", 7), ("float", 2.5), ("bool", True)])
def test_unset_or_empty_takes_the_default(kind, default):
    assert getattr(_env(), kind)("X", default=default) == default
    assert getattr(_env(X=" "), kind)("X", default=default) == default
    with pytest.raises(ImproperlyConfigured, match="Set the X environment variable"):
        getattr(_env(X=""), kind)("X")


@pytest.mark.parametrize(
    ("url", "scheme"),
    [("foo", ""), ("mysql://u:hunter2@db/x", "mysql"), ("mysqlx://u:hunter2@db/x", "mysqlx")],
)
def test_a_database_url_the_platform_cannot_use_names_its_scheme_not_its_password(
    url, scheme, recwarn
):
    with pytest.raises(ImproperlyConfigured) as refused:
        _env(DATABASE_URL=url).db("DATABASE_URL")
    assert f"DATABASE_URL: a URL of scheme {scheme!r} is not a database" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert not [w for w in recwarn if "hunter2" in str(w.message)]


def test_the_databases_of_the_platform_are_read():
    postgres = _env(DATABASE_URL="postgres://me:pw@db:5432/gpu").db("DATABASE_URL")
    assert postgres["ENGINE"] == "django.db.backends.postgresql" and postgres["NAME"] == "gpu"
    demo = _env().db("DATABASE_URL", default="sqlite:////tmp/demo.sqlite3")
    assert demo["ENGINE"] == "django.db.backends.sqlite3"


def test_a_mail_url_of_no_known_scheme_names_its_scheme_not_its_password():
    with pytest.raises(ImproperlyConfigured) as refused:
        _env(EMAIL_URL="smtpz://u:hunter2@mail").email_url("EMAIL_URL")
    assert "EMAIL_URL: a URL of scheme 'smtpz' is not a mail server" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert _env(EMAIL_URL="smtp+tls://u:p@mail:587").email_url("EMAIL_URL")["EMAIL_PORT"] == 587
