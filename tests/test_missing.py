"""No green CI run without the proof: a test that lacks a piece of the machine (the native
reader, Chromium) is skipped on a developer's machine, saying how to get the piece, and fails
under CI (CI=true) with the same message (helpers.missing). Pure: nothing is installed here.
"""

from __future__ import annotations

import browser
import pytest
import test_records
from helpers import missing

from matos_dagster.core.archive import native

HOW = "the frobnicator is missing: apt-get install frobnicator, then make install"


def outcome(call) -> tuple[str, str]:
    """('skipped' | 'failed', message) of a call that must end the test."""
    try:
        call()
    except pytest.skip.Exception as e:
        return "skipped", e.msg
    except pytest.fail.Exception as e:
        return "failed", e.msg
    raise AssertionError("the call neither skipped nor failed the test")


@pytest.mark.parametrize("ci, expected", [(None, "skipped"), ("", "skipped"), ("false", "skipped"),
                                          ("true", "failed"), ("TRUE", "failed"), ("1", "failed")])
def test_a_missing_piece_skips_locally_and_fails_under_ci_with_the_same_message(monkeypatch, ci, expected):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert outcome(lambda: missing(HOW)) == (expected, HOW)


@pytest.mark.parametrize("ci, expected", [(None, "skipped"), ("true", "failed")])
def test_the_native_reader_missing_skips_locally_and_fails_under_ci_saying_how_to_build_it(
        monkeypatch, ci, expected):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(native, "why_not", lambda conf=None: "_slice_reader.so is not built")
    kind, message = outcome(lambda: test_records.native_reader_built("native"))
    assert kind == expected
    assert "_slice_reader.so is not built" in message and "apt-get install librdkafka-dev gcc" in message
    test_records.native_reader_built("python")  # the Python case needs nothing


@pytest.mark.parametrize("ci, expected", [(None, "skipped"), ("true", "failed")])
def test_chromium_missing_skips_locally_and_fails_under_ci_saying_how_to_install_it(
        monkeypatch, tmp_path, ci, expected):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setattr(browser.os, "geteuid", lambda: 1000)  # not root: it may not install it
    kind, message = outcome(browser.ensure_chromium)
    assert kind == expected
    assert "apt-get install -y chromium" in message
