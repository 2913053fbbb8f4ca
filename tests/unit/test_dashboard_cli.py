"""`spotjobs dashboard`'s command (issue 47): loopback by default with its Host check; another
address the operator asked for is warned about, and then any Host is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from spotjobs.cli import main


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the command would serve, without a deployment or a socket: the app's trusted hosts and
    where Flask would bind it."""
    import flask

    import shared.settings
    import spotjobs.dashboard.app
    import spotjobs.dashboard.reading

    seen: dict[str, Any] = {}
    monkeypatch.setattr(shared.settings, "get_settings", lambda: object())
    monkeypatch.setattr(spotjobs.dashboard.reading, "deployment_of", lambda settings, project: object())
    create_app = spotjobs.dashboard.app.create_app

    def created(deployment: Any, **options: Any) -> flask.Flask:
        hosts = options.get("trusted_hosts")
        seen["trusted_hosts"] = None if hosts is None else list(hosts)
        return create_app(deployment, **options)

    def run(app: flask.Flask, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(spotjobs.dashboard.app, "create_app", created)
    monkeypatch.setattr(flask.Flask, "run", run)
    return seen


def test_it_binds_loopback_by_default(started: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard"]) == 0
    assert (started["host"], started["port"]) == ("127.0.0.1", 8765)
    assert started["trusted_hosts"] == ["127.0.0.1", "localhost", "::1"]  # DNS rebinding refused
    assert "warning" not in capsys.readouterr().err


def test_another_address_is_warned_about(started: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--host", "0.0.0.0", "--port", "9000"]) == 0
    assert (started["host"], started["port"], started["trusted_hosts"]) == ("0.0.0.0", 9000, None)
    error = capsys.readouterr().err
    assert "warning: binding 0.0.0.0, not loopback" in error and "cancel" in error


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("::1", "http://[::1]:8765/"),
        ("127.0.0.1", "http://127.0.0.1:8765/"),
        ("localhost", "http://localhost:8765/"),
        ("fd00::5", "http://[fd00::5]:8765/"),
    ],
)
def test_the_banner_names_a_url_a_browser_opens(
    started: dict[str, Any], capsys: pytest.CaptureFixture[str], host: str, url: str
) -> None:
    assert main(["dashboard", "--host", host]) == 0
    assert f"spotjobs dashboard on {url} " in capsys.readouterr().err  # an IPv6 address in brackets (RFC 3986)
