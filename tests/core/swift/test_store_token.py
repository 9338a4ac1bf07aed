"""A Spark task's Store uses the driver's token: a batch's thousand slices ask Swift for none.

On the real Swift (tempauth, the stack's v1): the driver's `Store.params` carry its storage URL
and token once it has them; a Store made from them makes no auth request, and one whose token
Swift refuses (expired) authenticates itself once and goes on.
"""

from __future__ import annotations

import dataclasses

import swiftclient.client

from matos_dagster.core.swift.store import Store


def test_a_store_made_from_the_drivers_params_asks_for_no_token_and_renews_a_refused_one(swift, monkeypatch):
    with swift.store() as driver:
        driver.check()
        params = driver.params
        assert params.preauth is not None and params.preauth[1]
        assert "preauth" not in repr(params) and params.preauth[1] not in repr(params)
        auths = []
        get_auth = swiftclient.client.get_auth
        monkeypatch.setattr(swiftclient.client, "get_auth", lambda *a, **k: auths.append(1) or get_auth(*a, **k))
        task = Store(params)
        task.put("a", b"x")
        assert task.get("a") == b"x" and auths == []
        expired = Store(dataclasses.replace(params, preauth=(params.preauth[0], "AUTH_tk" + "0" * 32)))
        assert expired.get("a") == b"x" and auths == [1]
        task.close(), expired.close()
