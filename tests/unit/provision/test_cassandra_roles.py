"""Whether a node asks for a login, from its own authenticator setting."""

from __future__ import annotations

import pytest

from pos_lambda.provision.cassandra_roles import authenticates


@pytest.mark.parametrize(
    "configured",
    [
        ["AllowAllAuthenticator"],  # 5.0's authenticator.class_name, as configured
        ["org.apache.cassandra.auth.AllowAllAuthenticator"],  # a full class name
        ["AllowAllAuthenticator", ""],
    ],
)
def test_allow_all_does_not_authenticate(configured: list[str]) -> None:
    assert authenticates(configured) is False


@pytest.mark.parametrize(
    "configured",
    [
        ["PasswordAuthenticator"],
        ["org.apache.cassandra.auth.PasswordAuthenticator"],
        ["com.example.LdapAuthenticator"],
        ["AllowAllAuthenticator", "PasswordAuthenticator"],  # both names answered: ask
        [],  # no answer: the safe side, the role is attempted and any error shown
    ],
)
def test_anything_else_authenticates(configured: list[str]) -> None:
    assert authenticates(configured) is True
