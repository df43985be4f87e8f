"""The environment models: validated once, errors name the variable."""

import pytest

from jobfence.config import ScheduledSettings, Settings, provider_env, queue_env, secret_env, table_env
from jobfence.errors import SettingsError


def test_prefixed_variables_become_logical_names():
    s = Settings.from_environ(
        {table_env("dpop_proofs"): "t1", queue_env("generation"): "https://q", secret_env("paypal"): "jobfence/paypal",
         provider_env("paypal"): "http://127.0.0.1:1"}
    )
    assert s.table("dpop_proofs") == "t1" and s.queue("generation") == "https://q"
    assert s.secret("paypal") == "jobfence/paypal" and s.provider_url("paypal") == "http://127.0.0.1:1"


def test_a_table_the_function_was_not_given_is_a_clear_error():
    with pytest.raises(SettingsError, match="TABLE_ORDERS is not set"):
        Settings.from_environ({}).table("orders")


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "JOB_NAME: Field required; LEASES_TABLE: Field required; RUNS_TABLE: Field required"),
        ({"JOB_NAME": "Drop Tables", "LEASES_TABLE": "abc", "RUNS_TABLE": "abc"}, "JOB_NAME: Value error, must be a lower_snake_case"),
        ({"JOB_NAME": "a", "LEASES_TABLE": "", "RUNS_TABLE": "abc"}, "LEASES_TABLE: String should have at least 3"),
    ],
)
def test_scheduled_settings_name_every_bad_variable(env, message):
    with pytest.raises(SettingsError) as bad:
        ScheduledSettings.from_environ(env)
    assert message in str(bad.value)
