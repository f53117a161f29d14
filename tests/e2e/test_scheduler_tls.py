"""A real kube-scheduler v1.35 calls gang-extender over HTTPS with a client certificate, using the
extender entry of the shipped TLS configuration (manifests/second-scheduler-tls), and a gang binds.
A client without the certificate is refused on the same port while the scheduler keeps working.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, Pki, wait_for
from support import ROOT, Extender, Sampler, bound, create, pod, pod_spec

pytestmark = pytest.mark.e2e

TLS_CONFIG = ROOT / "manifests" / "second-scheduler-tls" / "kube-scheduler-config.yaml"


def test_scheduler_reaches_the_extender_over_https_with_a_client_certificate(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    pki = Pki(tmp_path / "pki")  # its own CA: the extender trusts only it, not the cluster's
    serving = pki.issue("extender", "gang-extender", server_names=["localhost"], server_ips=["127.0.0.1"])
    client = pki.issue("scheduler-client", "system:kube-scheduler")

    probe = ssl.create_default_context(cafile=str(pki.ca.cert))
    probe.load_cert_chain(str(client.cert), str(client.key))
    ext = Extender(cp.kubeconfig, tmp_path, log=print, tls_context=probe,
                   args=["--tls-cert-file", str(serving.cert), "--tls-key-file", str(serving.key),
                         "--tls-client-ca-file", str(pki.ca.cert), "--gang-timeout-seconds", "12"])
    ext.start()
    try:
        config: dict[str, Any] = yaml.safe_load(TLS_CONFIG.read_text())
        (entry,) = config["extenders"]
        assert entry["enableHTTPS"] is True and entry["urlPrefix"].startswith("https://")
        entry["urlPrefix"] = ext.url
        files = {"caFile": pki.ca.cert, "certFile": client.cert, "keyFile": client.key}
        assert set(entry["tlsConfig"]) == set(files)
        entry["tlsConfig"] = {key: str(path) for key, path in files.items()}
        config["leaderElection"] = {"leaderElect": False}
        cp.start_scheduler(config)
        try:
            ns = "tls"
            cp.create_namespace(ns)
            labels = {"e2e-scenario": ns}
            nodes = set(cp.add_nodes(2, labels=labels, prefix="tls-n"))
            spec = {**pod_spec(cpu="1", selector=labels), "schedulerName": "gang-scheduler"}
            annotations = {"gang-extender.io/group": "g", "gang-extender.io/min-count": "3"}
            members = [pod(ns, f"m{i}", spec, annotations=annotations) for i in range(3)]
            with Sampler(cp, ns) as sampler:
                create(cp, *members)
                wait_for(lambda: len(bound(cp, ns, "m")) == 3, timeout=60, what="3 pods bound over HTTPS")
            assert set(bound(cp, ns, "m").values()) <= nodes
            assert sampler.partial("m", 3) == []
            metrics = ext.metrics()
            assert metrics.get('gang_extender_requests_total{outcome="ok",verb="bind"}', 0) >= 3

            # Same port, no client certificate: refused during the handshake.
            anonymous = ssl.create_default_context(cafile=str(pki.ca.cert))
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                urllib.request.urlopen(ext.url + "/readyz", timeout=5, context=anonymous).close()
            assert ext.ready()
        finally:
            cp.stop_scheduler()
    finally:
        ext.stop()
