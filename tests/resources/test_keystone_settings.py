"""Keystone v3 settings, without servers: each incomplete credential form is refused naming what to set."""

from __future__ import annotations

import pytest

from matos_dagster.core import settings
from matos_dagster.resources import SwiftResource

V3 = {"auth_version": "3", "auth_url": "https://keystone.example:5000/v3", "container": "c"}


def params(**fields: str):
    return SwiftResource(**{**V3, **fields}).params()


def test_each_v3_form_becomes_the_params_of_a_keystone_session():
    p = params(user_id="u1", project_id="p1", key="pw", region="R", interface="internal")
    assert (p.user_id, p.project_id, p.key, p.region, p.interface) == ("u1", "p1", "pw", "R", "internal")
    p = params(user="alice", domain="Default", project_name="matos", key="pw")
    assert (p.user, p.domain, p.project_name, p.project_domain) == ("alice", "Default", "matos", "")
    p = params(app_credential_id="a1", app_credential_secret="s1")
    assert (p.app_credential_id, p.app_credential_secret) == ("a1", "s1")


def test_a_versionless_keystone_url_gets_v3_and_a_v2_url_is_refused():
    assert params(auth_url="https://keystone.example:5000/", user_id="u", project_id="p", key="k").auth_url == \
        "https://keystone.example:5000/v3"
    with pytest.raises(ValueError, match=r"MATOS_SWIFT_AUTH_URL is .*a Keystone v2\.0 URL"):
        params(auth_url="https://keystone.example:5000/v2.0", user_id="u", project_id="p", key="k")


@pytest.mark.parametrize("fields, says", [
    ({}, "Keystone v3 needs a user: set MATOS_SWIFT_USER_ID, or MATOS_SWIFT_USER and MATOS_SWIFT_DOMAIN"),
    ({"user": "alice", "project_id": "p", "key": "k"}, "set MATOS_SWIFT_DOMAIN to its domain's name"),
    ({"user_id": "u", "project_id": "p"}, "MATOS_SWIFT_KEY (the Keystone v3 password) is empty"),
    ({"user_id": "u", "key": "k"}, "Keystone v3 needs a project: set MATOS_SWIFT_PROJECT_ID, or MATOS_SWIFT_PROJECT_NAME"),
    ({"user_id": "u", "key": "k", "project_name": "p"}, "set MATOS_SWIFT_PROJECT_DOMAIN"),
    ({"app_credential_id": "a"}, "MATOS_SWIFT_APP_CREDENTIAL_SECRET is empty"),
    ({"user_id": "u", "project_id": "p", "key": "k", "interface": "private"}, "MATOS_SWIFT_INTERFACE is 'private'"),
])
def test_an_incomplete_v3_form_is_refused_naming_the_setting(fields, says):
    with pytest.raises(ValueError) as e:
        params(**fields)
    assert says in str(e.value)


def test_no_v3_secret_shows_in_the_resource_or_its_params():
    resource = SwiftResource(**V3, user_id="u", project_id="p", key="pAsSwOrD1", app_credential_secret="aPpSeCrEt1")
    p = resource.params()
    for shown in (repr(resource), str(resource), repr(p)):
        assert "pAsSwOrD1" not in shown and "aPpSeCrEt1" not in shown


def test_every_keystone_setting_is_in_the_settings_table_and_the_secret_is_marked():
    table = settings.reference()  # the product's table and the local stack's
    for name in ("MATOS_SWIFT_USER_ID", "MATOS_SWIFT_PROJECT_ID", "MATOS_SWIFT_PROJECT_NAME",
                 "MATOS_SWIFT_PROJECT_DOMAIN", "MATOS_SWIFT_DOMAIN", "MATOS_SWIFT_APP_CREDENTIAL_ID",
                 "MATOS_SWIFT_APP_CREDENTIAL_SECRET", "MATOS_SWIFT_REGION", "MATOS_SWIFT_INTERFACE",
                 "MATOS_DEVSTACK_AUTH", "MATOS_DEVSTACK_KEYSTONE_PORT"):
        assert f"| `{name}` |" in table
    assert settings.BY_NAME["MATOS_SWIFT_APP_CREDENTIAL_SECRET"].secret
    assert settings.BY_NAME["MATOS_SWIFT_KEY"].secret
