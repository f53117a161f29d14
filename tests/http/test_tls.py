"""HTTPS and client-certificate authentication of ``gang-extender serve`` (a real gunicorn process).

Certificates come from hack/controlplane.py's ``Pki`` (openssl CLI, ECDSA P-256). The e2e tier runs the
real kube-scheduler against the same setup (tests/e2e/test_scheduler_tls.py).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender import cli
from extender.config import Settings, load, validate
from extender.errors import ConfigError
from tests.http.fuzzing import snapshot_document

HACK = Path(__file__).resolve().parents[2] / "hack"
if str(HACK) not in sys.path:
    sys.path.insert(0, str(HACK))

from controlplane import CertPair, Pki, free_ports, tail, wait_for  # noqa: E402

GANG_EXTENDER = str(Path(sys.executable).with_name("gang-extender"))
FILTER = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}},
                     "NodeNames": ["node-1"]}).encode()


# ------------------------------------------------------------------------------------ settings
def test_cert_and_key_go_together(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    assert validate(Settings(tls_cert_file=str(cert))) == [
        "tls-cert-file needs tls-key-file too (HTTPS takes a certificate and its key)"]
    assert validate(Settings(tls_key_file=str(cert))) == [
        "tls-key-file needs tls-cert-file too (HTTPS takes a certificate and its key)"]
    assert validate(Settings(tls_cert_file=str(cert), tls_key_file=str(cert))) == []


def test_client_ca_needs_https_and_all_problems_come_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load({"tls_client_ca_file": str(tmp_path / "ca.pem"), "port": "0"})
    assert info.value.problems == [
        "port must be 1..65535, got 0",
        "tls-client-ca-file needs tls-cert-file and tls-key-file (client certificates are checked only over HTTPS)",
        f"tls-client-ca-file: no such file {str(tmp_path / 'ca.pem')!r}",
    ]


def test_settings_from_environment(tmp_path: Path) -> None:
    for name in ("c", "k", "ca"):
        (tmp_path / name).write_text("x")
    env = {"GANG_EXTENDER_TLS_CERT_FILE": str(tmp_path / "c"), "GANG_EXTENDER_TLS_KEY_FILE": str(tmp_path / "k"),
           "GANG_EXTENDER_TLS_CLIENT_CA_FILE": str(tmp_path / "ca")}
    settings = load({}, env)
    assert (settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file) == (
        str(tmp_path / "c"), str(tmp_path / "k"), str(tmp_path / "ca"))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_pair(pki: Pki) -> CertPair:
    return pki.issue("extender", "gang-extender", server_names=["localhost"], server_ips=["127.0.0.1"])


@pytest.fixture(scope="module")
def client_pair(pki: Pki) -> CertPair:
    return pki.issue("scheduler-client", "system:kube-scheduler")


def test_mismatched_or_garbage_files_exit_2_before_gunicorn(pki: Pki, server_pair: CertPair, client_pair: CertPair,
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    code = cli.main(["serve", "--cluster-snapshot", str(garbage), "--tls-cert-file", str(server_pair.cert),
                     "--tls-key-file", str(client_pair.key), "--tls-client-ca-file", str(garbage)])
    assert code == 2
    err = capsys.readouterr().err
    assert "tls-cert-file/tls-key-file: cannot load the certificate and key" in err
    assert "tls-client-ca-file: cannot load CA certificates" in err


# ------------------------------------------------------------------------------ a real server
@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki, server_pair: CertPair) -> Iterator[int]:
    workdir = tmp_path_factory.mktemp("tls-server")
    snapshot = workdir / "snapshot.json"
    snapshot.write_text(json.dumps(snapshot_document()))
    port = free_ports(1)[0]
    log_path = workdir / "server.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [GANG_EXTENDER, "serve", "--cluster-snapshot", str(snapshot), "--port", str(port),
             "--tls-cert-file", str(server_pair.cert), "--tls-key-file", str(server_pair.key),
             "--tls-client-ca-file", str(pki.ca.cert)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for(lambda: proc.poll() is not None or "Booting worker" in log_path.read_text(), timeout=30,
                 what="gunicorn worker")
        assert proc.poll() is None, tail(log_path)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    assert "Traceback" not in log_path.read_text(), tail(log_path)


def _context(pki: Pki, client: CertPair | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def _post(port: int, context: ssl.SSLContext) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("POST", "/filter", body=FILTER, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_https_with_the_client_certificate(https_server: int, pki: Pki, client_pair: CertPair) -> None:
    wait_for(lambda: _post(https_server, _context(pki, client_pair))[0] == 200, timeout=20, what="HTTPS filter")
    status, body = _post(https_server, _context(pki, client_pair))
    assert status == 200 and json.loads(body)["NodeNames"] == ["node-1"]


def test_no_client_certificate_is_refused(https_server: int, pki: Pki, client_pair: CertPair) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _post(https_server, _context(pki, None))
    assert _post(https_server, _context(pki, client_pair))[0] == 200  # and the server is still fine


def test_client_certificate_of_another_ca_is_refused(https_server: int, pki: Pki, client_pair: CertPair,
                                                     tmp_path: Path) -> None:
    stranger = Pki(tmp_path / "other").issue("stranger", "system:kube-scheduler")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _post(https_server, _context(pki, stranger))
    assert _post(https_server, _context(pki, client_pair))[0] == 200


def test_plain_http_gets_no_answer(https_server: int, pki: Pki, client_pair: CertPair) -> None:
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)), urllib.request.urlopen(
            f"http://127.0.0.1:{https_server}/healthz", timeout=5) as reply:
        assert reply.status != 200
    assert _post(https_server, _context(pki, client_pair))[0] == 200



def test_a_large_reply_goes_out_whole_to_a_slow_reader(https_server: int, pki: Pki, client_pair: CertPair) -> None:
    """The poller writes replies without waiting (TLS: again after each want-write): 15,000 names of 253
    characters, a 4.9 MB reply read 64 KiB at a time."""
    names = [f"{i:06d}-" + "n" * 246 for i in range(15_000)]
    body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}},
                       "NodeNames": names}).encode()
    conn = http.client.HTTPSConnection("127.0.0.1", https_server, context=_context(pki, client_pair), timeout=10)
    try:
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        received = bytearray()
        while chunk := reply.read(64 * 1024):
            received += chunk
            time.sleep(0.002)
    finally:
        conn.close()
    assert reply.status == 200
    assert len(received) > 4_000_000 and len(json.loads(received)["FailedNodes"]) == 15_000
