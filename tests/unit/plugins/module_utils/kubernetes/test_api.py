# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube_api.py without a Kubernetes API server: which failures are tried again and for how long, the writes the
connection pool counts, and /metrics read through the pool (no ``call_api``, whose signature changed between
releases of the client). The same calls against a real API server: tests/emulator/test_kubernetes.py."""

import http.server
import threading

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes import api as kube_api
from ansible_collections.talos_linux.talos.plugins.module_utils.kubernetes.api import KubeAPI, KubernetesAPIError

METRICS = (b'apiserver_requested_deprecated_apis{group="flowcontrol.apiserver.k8s.io",removed_release="1.37",'
           b'resource="flowschemas",subresource="",version="v1beta3"} 1\n')


class _Handler(http.server.BaseHTTPRequestHandler):
    answers = []  # (status, body) for the next requests, in turn; then 200 and METRICS
    seen = []

    def _answer(self):
        self.seen.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        status, body = self.answers.pop(0) if self.answers else (200, METRICS)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.answers, _Handler.seen = [], []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _api(server, retry_seconds=0):
    """A KubeAPI on a plain-HTTP server (its TLS setup needs a kubeconfig; what is tested here does not)."""
    api = KubeAPI.__new__(KubeAPI)
    api.server, api.retry_seconds, api._answered = server, retry_seconds, False
    api._pool = kube_api._WriteCountingPoolManager(retries=False)
    return api


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(kube_api, "RETRY_BACKOFF", (0.01, 0.02))


def test_metrics_are_read_through_the_connection_pool(server):
    assert _api(server).deprecated_api_requests() == [
        {"group": "flowcontrol.apiserver.k8s.io", "version": "v1beta3", "resource": "flowschemas", "removed_release": "1.37"}]
    assert _Handler.seen == [("GET", "/metrics")]


def test_429_and_5xx_are_tried_again_within_the_time_given(server):
    _Handler.answers = [(429, b"slow down"), (503, b"restarting"), (500, b"etcd")]
    assert len(_api(server, retry_seconds=5).deprecated_api_requests()) == 1
    assert len(_Handler.seen) == 4


def test_a_refusal_is_not_tried_again(server):
    _Handler.answers = [(403, b"forbidden")]
    with pytest.raises(KubernetesAPIError) as refused:
        _api(server, retry_seconds=5).deprecated_api_requests()
    assert refused.value.status == 403 and len(_Handler.seen) == 1
    assert refused.value.message.startswith("The Kubernetes API at %s refused to read its metrics: 403" % server)


def test_retries_end_when_the_time_given_is_over(server):
    _Handler.answers = [(503, b"restarting")] * 100
    with pytest.raises(KubernetesAPIError) as failed:
        _api(server, retry_seconds=0.1).deprecated_api_requests()
    assert failed.value.status == 503 and 2 <= len(_Handler.seen) < 100


def test_nothing_answering_fails_at_once_until_the_api_server_has_answered(server):
    api = _api("http://127.0.0.1:1", retry_seconds=0.3)
    calls = []

    def unreachable(_request_timeout):
        calls.append(1)
        raise OSError("connection refused")
    with pytest.raises(KubernetesAPIError) as failed:
        api._ask("list the nodes", unreachable)
    assert failed.value.status is None and len(calls) == 1
    # Once it answered, a restart is waited out.
    api._ask("read its version", lambda _request_timeout: "v1.37.2")
    answers = [OSError("connection refused"), OSError("connection refused")]

    def restarting(_request_timeout):
        if answers:
            raise answers.pop(0)
        return "ok"
    assert api._ask("list the nodes", restarting) == "ok"


def test_reads_a_wait_polls_are_tried_once(server):
    _Handler.answers = [(503, b"restarting")]
    with pytest.raises(KubernetesAPIError):
        _api(server, retry_seconds=5)._get("read its metrics", "/metrics", retry=False)
    assert len(_Handler.seen) == 1


def test_the_pool_counts_writes_but_not_reads_dry_runs_or_refusals(server):
    api = _api(server)
    pool = api._pool
    pool.request("GET", server + "/api/v1/nodes")
    pool.request("PATCH", server + "/api/v1/namespaces/kube-system/configmaps/x?fieldManager=talos&dryRun=All", body=b"{}")
    assert api.writes == 0
    pool.request("PATCH", server + "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?fieldManager=talos", body=b"{}")
    pool.request("DELETE", server + "/api/v1/namespaces/kube-system/configmaps/x")
    _Handler.answers = [(409, b"conflict")]
    pool.request("POST", server + "/api/v1/namespaces/kube-system/configmaps", body=b"{}")
    assert api.writes == 2


@pytest.mark.parametrize("status, retryable", [(None, True), (429, True), (500, True), (503, True), (404, False),
                                               (403, False), (409, False)])
def test_is_retryable(status, retryable):
    assert kube_api.is_retryable(KubernetesAPIError("x", status=status)) is retryable


def test_api_server_url():
    assert kube_api.api_server_url(" https://10.5.0.2:6443/ ", "kubernetes_endpoint") == "https://10.5.0.2:6443"
    for value in ("10.5.0.2:6443", "https://", "https://10.5.0.2:6443/api", "ftp://x"):
        with pytest.raises(kube_api.TalosConfigError, match=r"^kubernetes_endpoint .* is not the URL of a Kubernetes API server"):
            kube_api.api_server_url(value, "kubernetes_endpoint")
