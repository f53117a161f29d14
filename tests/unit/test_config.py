"""extender.config and the CLI front door: flag > env > default, and every problem reported at once."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

from extender import cli, config
from extender.config import ENV_PREFIX, LOG_LEVELS, Settings, load, validate
from extender.errors import ConfigError
from extender.http import server


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load({}, {})
    assert settings == Settings()
    assert settings == Settings(host="127.0.0.1", port=8888, kubeconfig=None, cluster_snapshot=None,
                                gang_timeout_seconds=20.0, gang_backoff_seconds=10.0, cache_size=1_000_000,
                                cache_ttl_seconds=300.0, max_body_bytes=4 * 2**20, threads=4096,
                                bind_parallelism=32, log_level="INFO")
    assert load(None, {}) == Settings()


def test_field_names() -> None:
    assert Settings.field_names() == ["host", "port", "kubeconfig", "cluster_snapshot", "gang_timeout_seconds",
                                      "gang_backoff_seconds", "cache_size", "cache_ttl_seconds", "max_body_bytes",
                                      "threads", "bind_parallelism", "log_level", "record_file", "record_max_bytes",
                                      "release_journal", "discovery_interval_seconds", "group_status",  # issue 5
                                      "explain_publish_seconds",  # issue 16: kubectl gang
                                      "tls_cert_file", "tls_key_file", "tls_client_ca_file",  # issue 6
                                      "scheduler_http_timeout_seconds", "bind_answer_margin_seconds",
                                      "scheduler_names", "watch_stale_seconds",  # issue 11
                                      "leader_election", "lease_namespace", "lease_name", "lease_duration_seconds",
                                      "lease_renew_deadline_seconds", "lease_retry_period_seconds",
                                      "release_intents_max_bytes",
                                      "client_timeout_seconds", "max_full_nodes_body_bytes",  # issue 11
                                      "request_buffer_bytes", "topology_levels",  # issue 12
                                      "max_wait_seconds",  # issue 13
                                      "max_evictions_per_minute", "preemption",
                                      "bind_mode",  # issue 14
                                      "quorum_wait_seconds",  # issue 29
                                      "metrics_address"]  # issue 16: the metrics-only listener


@pytest.mark.parametrize(("args", "problem"), [
    ({"discovery_interval_seconds": "0"}, "discovery-interval-seconds must be 1..3600, got 0.0"),
    ({"discovery_interval_seconds": "nan"}, "discovery-interval-seconds must be 1..3600, got nan"),
    ({"group_status": "yes"}, "group-status must be on or off, got 'yes'"),
    ({"release_journal": "/no/such/dir/releases.jsonl"}, "release-journal: directory '/no/such/dir' does not exist"),
])
def test_issue5_settings_are_validated(args: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(args, {})
    assert caught.value.problems == [problem]


def test_issue5_settings_defaults_and_env() -> None:
    assert (Settings().discovery_interval_seconds, Settings().group_status) == (30.0, "on")
    settings = load({}, {"GANG_EXTENDER_GROUP_STATUS": "off", "GANG_EXTENDER_DISCOVERY_INTERVAL_SECONDS": "5"})
    assert (settings.discovery_interval_seconds, settings.group_status) == (5.0, "off")


@pytest.mark.parametrize(
    ("args", "environ", "name", "expected"),
    [
        # default
        ({}, {}, "port", 8888),
        ({"port": None}, {}, "port", 8888),
        # env over default
        ({}, {"GANG_EXTENDER_PORT": "9000"}, "port", 9000),
        ({}, {"GANG_EXTENDER_HOST": "0.0.0.0"}, "host", "0.0.0.0"),
        ({}, {"GANG_EXTENDER_GANG_TIMEOUT_SECONDS": "2.5"}, "gang_timeout_seconds", 2.5),
        ({}, {"GANG_EXTENDER_CACHE_SIZE": "0"}, "cache_size", 0),
        ({}, {"GANG_EXTENDER_LOG_LEVEL": "debug"}, "log_level", "debug"),
        # an empty env var is unset
        ({}, {"GANG_EXTENDER_PORT": ""}, "port", 8888),
        # flag over env
        ({"port": "7000"}, {"GANG_EXTENDER_PORT": "9000"}, "port", 7000),
        ({"gang_timeout_seconds": "3"}, {"GANG_EXTENDER_GANG_TIMEOUT_SECONDS": "4"}, "gang_timeout_seconds", 3.0),
        ({"host": "::1"}, {"GANG_EXTENDER_HOST": "0.0.0.0"}, "host", "::1"),
        # flag over default; values may be typed already
        ({"threads": 4}, {}, "threads", 4),
        ({"cache_ttl_seconds": 1}, {}, "cache_ttl_seconds", 1.0),
        # env names are exact
        ({}, {"gang_extender_port": "9000", "GANG_EXTENDER_PORTS": "1"}, "port", 8888),
    ],
)
def test_precedence(args: dict[str, Any], environ: dict[str, str], name: str, expected: object) -> None:
    value = getattr(load(args, environ), name)
    assert value == expected
    assert type(value) is type(expected)


def test_every_setting_has_an_env_var() -> None:
    environ = {
        "GANG_EXTENDER_HOST": "0.0.0.0", "GANG_EXTENDER_PORT": "1", "GANG_EXTENDER_GANG_TIMEOUT_SECONDS": "1",
        "GANG_EXTENDER_GANG_BACKOFF_SECONDS": "0", "GANG_EXTENDER_CACHE_SIZE": "1",
        "GANG_EXTENDER_CACHE_TTL_SECONDS": "1", "GANG_EXTENDER_MAX_BODY_BYTES": "1024",
        "GANG_EXTENDER_THREADS": "1", "GANG_EXTENDER_BIND_PARALLELISM": "1", "GANG_EXTENDER_LOG_LEVEL": "ERROR",
    }
    assert load({}, environ) == Settings("0.0.0.0", 1, None, None, 1.0, 0.0, 1, 1.0, 1024, 1, 1, "ERROR")


def test_paths_must_exist(tmp_path: Path) -> None:
    existing = tmp_path / "kubeconfig"
    existing.write_text("apiVersion: v1\n")
    assert load({"kubeconfig": str(existing)}, {}).kubeconfig == str(existing)
    assert load({}, {"GANG_EXTENDER_CLUSTER_SNAPSHOT": str(existing)}).cluster_snapshot == str(existing)
    with pytest.raises(ConfigError) as info:
        load({"kubeconfig": str(tmp_path / "missing")}, {"GANG_EXTENDER_CLUSTER_SNAPSHOT": str(tmp_path)})
    assert info.value.problems == [f"kubeconfig: no such file {str(tmp_path / 'missing')!r}",
                                   f"cluster-snapshot: no such file {str(tmp_path)!r}"]


def test_config_error_lists_every_problem_at_once(tmp_path: Path) -> None:
    args = {"port": "0", "threads": "x", "gang_timeout_seconds": "soon", "cluster_snapshot": str(tmp_path / "nope")}
    environ = {"GANG_EXTENDER_CACHE_SIZE": "-1", "GANG_EXTENDER_LOG_LEVEL": "LOUD",
               "GANG_EXTENDER_MAX_BODY_BYTES": "10", "GANG_EXTENDER_BIND_PARALLELISM": "many",
               "GANG_EXTENDER_CACHE_TTL_SECONDS": "0", "GANG_EXTENDER_GANG_BACKOFF_SECONDS": "-1"}
    with pytest.raises(ConfigError) as info:
        load(args, environ)
    problems = [
        "--gang-timeout-seconds: expected a number, got 'soon'",
        "--threads: expected an integer, got 'x'",
        "GANG_EXTENDER_BIND_PARALLELISM: expected an integer, got 'many'",
        "port must be 1..65535, got 0",
        "gang-backoff-seconds must be >= 0, got -1.0",
        "cache-size must be >= 0, got -1",
        "cache-ttl-seconds must be > 0, got 0.0",
        "max-body-bytes must be >= 1024, got 10",
        "log-level must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'",
        f"cluster-snapshot: no such file {str(tmp_path / 'nope')!r}",
    ]
    assert info.value.problems == problems
    assert str(info.value) == "invalid settings:\n" + "\n".join(f"  - {p}" for p in problems)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"port": "65536"}, "port must be 1..65535, got 65536"),
        ({"port": "-1"}, "port must be 1..65535, got -1"),
        ({"port": "1.5"}, "--port: expected an integer, got '1.5'"),
        ({"port": "0x10"}, "--port: expected an integer, got '0x10'"),
        ({"gang_timeout_seconds": "0"}, "gang-timeout-seconds must be > 0, got 0.0"),
        ({"gang_timeout_seconds": "nan"}, "gang-timeout-seconds must be > 0, got nan"),
        ({"gang_timeout_seconds": "inf"}, "gang-timeout-seconds must be finite, got inf"),
        ({"gang_backoff_seconds": "nan"}, "gang-backoff-seconds must be >= 0, got nan"),
        ({"max_wait_seconds": "-1"}, "max-wait-seconds must be >= 0 and finite, got -1.0"),
        ({"cache_ttl_seconds": "-5"}, "cache-ttl-seconds must be > 0, got -5.0"),
        ({"max_evictions_per_minute": "0"}, "max-evictions-per-minute must be > 0, got 0"),
        ({"max_evictions_per_minute": "-3"}, "max-evictions-per-minute must be > 0, got -3"),
        ({"max_evictions_per_minute": "1.5"}, "--max-evictions-per-minute: expected an integer, got '1.5'"),
        ({"preemption": "maybe"}, "preemption must be on or off, got 'maybe'"),
        ({"bind_mode": "gated"}, "bind-mode must be barrier or filter-gated, got 'gated'"),
        ({"threads": "0"}, "threads must be 1..10000, got 0"),
        ({"threads": "10001"}, "threads must be 1..10000, got 10001"),
        ({"bind_parallelism": "0"}, "bind-parallelism must be 1..256, got 0"),
        ({"bind_parallelism": "257"}, "bind-parallelism must be 1..256, got 257"),
        ({"max_body_bytes": "1023"}, "max-body-bytes must be >= 1024, got 1023"),
        ({"log_level": "trace"}, "log-level must be one of DEBUG, INFO, WARNING, ERROR, got 'trace'"),
        ({"client_timeout_seconds": "0"}, "client-timeout-seconds must be 0.1..300, got 0.0"),
        ({"client_timeout_seconds": "nan"}, "client-timeout-seconds must be 0.1..300, got nan"),
        ({"max_full_nodes_body_bytes": "100"}, "max-full-nodes-body-bytes must be 0 (refused) or >= 1024, got 100"),
        ({"max_full_nodes_body_bytes": str(2**30)},
         f"request-buffer-bytes must be at least the largest body cap ({2**30}), got {16 * 2**20}"),
        ({"request_buffer_bytes": str(2**20)},
         f"request-buffer-bytes must be at least the largest body cap ({4 * 2**20}), got {2**20}"),
    ],
)
def test_single_problems(args: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(args, {})
    assert info.value.problems == [problem]


@pytest.mark.parametrize(
    "args",
    [
        {"port": "1"}, {"port": "65535"}, {"threads": "1"}, {"threads": "10000"}, {"bind_parallelism": "256"},
        {"max_body_bytes": "1024"}, {"gang_backoff_seconds": "0"}, {"cache_size": "0"},
        {"log_level": "warning"}, {"gang_timeout_seconds": "0.001"}, {"client_timeout_seconds": "0.1"},
        {"max_full_nodes_body_bytes": str(16 * 2**20)}, {"request_buffer_bytes": str(4 * 2**20)},
        {"max_evictions_per_minute": "1"},
    ],
)
def test_boundaries_accepted(args: dict[str, Any]) -> None:
    load(args, {})


def test_validate_is_empty_for_defaults() -> None:
    assert validate(Settings()) == []
    assert LOG_LEVELS == ("DEBUG", "INFO", "WARNING", "ERROR")


def test_add_arguments_registers_one_flag_per_setting() -> None:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    parsed = vars(parser.parse_args([]))
    assert parsed == dict.fromkeys(Settings.field_names())  # None: env vars can still fill them
    parsed = vars(parser.parse_args(["--gang-timeout-seconds", "5", "--cluster-snapshot", "x.yaml"]))
    assert parsed["gang_timeout_seconds"] == "5"
    assert parsed["cluster_snapshot"] == "x.yaml"


# --------------------------------------------------------------------------------------------- CLI
def test_cli_reports_every_problem_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--port", "0", "--threads", "x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("gang-extender: invalid settings:\n"
                            "  - --threads: expected an integer, got 'x'\n"
                            "  - port must be 1..65535, got 0\n")


def test_cli_names_the_env_var_at_fault(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GANG_EXTENDER_THREADS", "lots")
    assert cli.main(["serve"]) == 2
    assert capsys.readouterr().err == ("gang-extender: invalid settings:\n"
                                       "  - GANG_EXTENDER_THREADS: expected an integer, got 'lots'\n")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    calls: list[Settings] = []
    monkeypatch.setattr(server, "serve", calls.append)
    monkeypatch.setattr(cli, "_setup_logging", lambda level: None)
    return calls


def test_cli_serve_precedence(monkeypatch: pytest.MonkeyPatch, served: list[Settings]) -> None:
    monkeypatch.setenv("GANG_EXTENDER_PORT", "9000")
    monkeypatch.setenv("GANG_EXTENDER_THREADS", "16")
    assert cli.main(["serve", "--port", "7000"]) == 0
    assert len(served) == 1
    assert served[0].port == 7000
    assert served[0].threads == 16
    assert served[0].host == "127.0.0.1"


@pytest.mark.parametrize("argv", [[], ["bogus"], ["serve", "--bogus"], ["serve", "--port"]])
def test_cli_usage_errors_exit_2(argv: list[str], served: list[Settings],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: gang-extender" in capsys.readouterr().err
    assert served == []


def test_cli_help_names_every_env_var(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in Settings.field_names():
        assert "--" + name.replace("_", "-") in text
        assert "GANG_EXTENDER_" + name.upper() in text


@pytest.mark.parametrize(("args", "problem"), [
    ({"leader_election": "yes"}, "leader-election must be on or off, got 'yes'"),
    ({"lease_namespace": "Kube_System"}, "lease-namespace must be a namespace name, got 'Kube_System'"),
    ({"lease_name": "a/b"}, "lease-name must be a DNS subdomain name, got 'a/b'"),
    ({"lease_duration_seconds": "10"}, "lease-duration-seconds (10.0) must be greater than "
                                       "lease-renew-deadline-seconds (10.0): the leader must stop acting before a "
                                       "standby may take over"),
    ({"lease_duration_seconds": "15.5"}, "lease-duration-seconds must be whole seconds, got 15.5"),
    ({"lease_retry_period_seconds": "9"}, "lease-renew-deadline-seconds (10.0) must be greater than 1.2 x "
                                          "lease-retry-period-seconds (9.0)"),
    ({"lease_retry_period_seconds": "nan"}, "lease-duration-seconds, lease-renew-deadline-seconds and "
                                            "lease-retry-period-seconds must be in (0, 3600], got 15.0, 10.0, nan"),
    ({"release_intents_max_bytes": "300000"}, "release-intents-max-bytes must be 1024..245760, got 300000"),
])
def test_issue11_lease_settings_are_validated(args: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(args, {})
    assert caught.value.problems == [problem]


def test_issue11_lease_settings_defaults_are_valid_for_the_elector() -> None:
    from extender.kube.lease import ElectionConfig

    settings = load({"leader_election": "on", "lease_namespace": "gang-scheduler"}, {})
    assert (settings.lease_name, settings.lease_duration_seconds, settings.lease_renew_deadline_seconds,
            settings.lease_retry_period_seconds) == ("gang-extender", 15.0, 10.0, 2.0)
    assert ElectionConfig(settings.lease_namespace, settings.lease_name, settings.lease_duration_seconds,
                          settings.lease_renew_deadline_seconds, settings.lease_retry_period_seconds).problems() == []


# ------------------------------------------------------------------------------ issue 12: topology levels
def test_issue12_topology_levels_default_is_empty_and_env_and_flag_fill_it() -> None:
    assert Settings().topology_levels == ""
    assert config.topology_levels(load({}, {})) == ()
    settings = load({}, {"GANG_EXTENDER_TOPOLOGY_LEVELS": "topology.kubernetes.io/zone, example.com/rack"})
    assert config.topology_levels(settings) == ("topology.kubernetes.io/zone", "example.com/rack")
    settings = load({"topology_levels": "zone,,rack,kubernetes.io/hostname,"}, {"GANG_EXTENDER_TOPOLOGY_LEVELS": "x"})
    assert config.topology_levels(settings) == ("zone", "rack", "kubernetes.io/hostname")


@pytest.mark.parametrize(("value", "problems"), [
    ("zone,Bad Key", ["topology-levels: 'Bad Key' is not a valid label key: the name must consist of letters, "
                      "digits, '-', '_' or '.', and start and end with a letter or digit"]),
    ("Example.com/rack", ["topology-levels: 'Example.com/rack' is not a valid label key: the prefix must be a DNS "
                          "subdomain (lowercase letters, digits, '-' and '.', e.g. 'example.com')"]),
    ("a/b/c", ["topology-levels: 'a/b/c' is not a valid label key: it may contain at most one '/'"]),
    ("zone,rack,zone,rack", ["topology-levels: 'zone' is listed twice", "topology-levels: 'rack' is listed twice"]),
    ("kubernetes.io/hostname,example.com/rack", ["topology-levels: kubernetes.io/hostname is the narrowest level "
                                                 "(one node) and must come last"]),
])
def test_issue12_topology_levels_are_validated(value: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load({"topology_levels": value}, {})
    assert caught.value.problems == problems


def test_issue12_topology_levels_problems_come_with_the_others() -> None:
    with pytest.raises(ConfigError) as caught:
        load({"port": "0", "topology_levels": "/rack"}, {})
    assert caught.value.problems == ["port must be 1..65535, got 0",
                                     "topology-levels: '/rack' is not a valid label key: the prefix before '/' "
                                     "must not be empty"]


@pytest.mark.parametrize("value", ["0.5", "-1", "3601", "nan"])
def test_explain_publish_seconds_is_off_or_a_sane_interval(value: str) -> None:
    assert load({"explain_publish_seconds": "0"}, {}).explain_publish_seconds == 0
    with pytest.raises(ConfigError, match="explain-publish-seconds"):
        load({"explain_publish_seconds": value}, {})


QUORUM_WAIT_PROBLEM = "quorum-wait-seconds must be 0..1 and at most a tenth of scheduler-http-timeout-seconds, got "


@pytest.mark.parametrize(("args", "problem"), [
    ({"quorum_wait_seconds": "-0.1"}, QUORUM_WAIT_PROBLEM + "-0.1"),
    ({"quorum_wait_seconds": "nan"}, QUORUM_WAIT_PROBLEM + "nan"),
    ({"quorum_wait_seconds": "1.5"}, QUORUM_WAIT_PROBLEM + "1.5"),
    ({"quorum_wait_seconds": "0.5", "scheduler_http_timeout_seconds": "2"}, QUORUM_WAIT_PROBLEM + "0.5"),
])
def test_the_quorum_wait_stays_well_inside_the_schedulers_timeout(args: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(args, {})
    assert caught.value.problems == [problem]


def test_the_quorum_wait_defaults_and_may_be_off() -> None:
    assert Settings().quorum_wait_seconds == 0.1
    assert load({"quorum_wait_seconds": "0"}, {}).quorum_wait_seconds == 0.0
    assert load({}, {"GANG_EXTENDER_QUORUM_WAIT_SECONDS": "1", "GANG_EXTENDER_SCHEDULER_HTTP_TIMEOUT_SECONDS": "10"}
                ).quorum_wait_seconds == 1.0
