# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real Kubernetes API server for tests: upstream kube-apiserver (``main.go`` here) storing its objects in the
control planes' etcd (``etcd=``, as on Talos) or, without one, in an etcd embedded in its process.

``binary()`` builds it once per process with ``./build`` (Go modules; a missing
Go toolchain is an error, never a skip). ``KubeAPIServer.start`` serves it on
127.0.0.1 with a certificate signed by the cluster's Kubernetes CA, trusting
client certificates of that CA (the admin kubeconfig Talos's Kubeconfig RPC
returns) and the cluster's service-account key. There is no
controller-manager, scheduler or kubelet: what they would write is up to the
test (the emulator's kubelet shim, ``talos_emulator/kubelets.py``). ``address`` puts it on another loopback
address, such as an emulated control plane's, where a cluster's endpoint names it.

``follow_cas`` restarts it whenever the Kubernetes CAs of the control planes'
configs change, as Talos restarts the kube-apiserver static pod: serving a
certificate of the issuing CA and trusting client certificates of the issuing
and every accepted CA (Talos's ``ca.crt`` of the static pod); ``restart_delay``
keeps the old process serving that long first.
"""

import http.client
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from harness_files import HarnessBuild, issue_certificate, log_tail, write_private

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUILD = os.path.join(_HERE, "build")
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/12"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
_SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  "kubernetes.default.svc.cluster.local")
# Beside the address it listens on (127.0.0.1 by default): 127.0.0.1, and 10.96.0.1, the "kubernetes" Service's
# address in the service range.
_SERVING_IPS = ("127.0.0.1", "10.96.0.1")
LOOPBACK = "127.0.0.1"


class KubeAPIServerError(RuntimeError):
    """The test API server could not be built or started."""


_build = HarnessBuild(_BUILD, "the test Kubernetes API server", KubeAPIServerError)


def binary():
    """The path of the kube-apiserver harness, built by ``./build`` on the first call of the process."""
    return _build.binary()


def port_is_free(port, address=LOOPBACK):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address=LOOPBACK):
    """A TCP port free on ``address`` now: choose the API server's port before the configs that name it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _free_port_pair(taken):
    """Two consecutive free ports (the embedded etcd's client and peer ports), neither of them ``taken``."""
    for _attempt in range(100):
        port = free_port()
        if port < 65535 and taken not in (port, port + 1) and port_is_free(port + 1):
            return port
    raise KubeAPIServerError("no two consecutive free ports for the embedded etcd")


class KubeAPIServer:
    """A running test API server: ``url``, ``version``, ``kubeconfig_path`` (admin, ``system:masters``), ``stop()``."""

    def __init__(self, state_dir, address, port, process, log_path, ca_path, admin_cert_path, admin_key_path, kubeconfig_path):
        self.state_dir = state_dir
        self.address = address
        self.port = port
        self.url = "https://%s:%d" % (address, port)
        self.process = process
        self.log_path = log_path
        self.ca_path = ca_path
        self.kubeconfig_path = kubeconfig_path
        self.version = None
        self.command = None
        self.restarts = 0
        self.client_ca_pem = None
        # Seconds the process keeps serving with its old CAs once follow_cas sees them change, before it stops to
        # restart: a kubelet that takes its time to replace the static pod.
        self.restart_delay = 0
        self._admin_cert_path = admin_cert_path
        self._admin_key_path = admin_key_path
        self._follower = None

    @classmethod
    def start(cls, state_dir, ca_cert_pem, ca_key_pem, service_account_key_pem, port=None, timeout=90, etcd=None,
              address=LOOPBACK):
        """Start a server whose clients are certificates of the Kubernetes CA ``ca_cert_pem``/``ca_key_pem`` (PEM,
        bytes or text) and whose service-account tokens are signed with ``service_account_key_pem``; return it once
        ``/readyz`` answers. ``port`` (see ``free_port``) is the secure port, a free one by default. ``etcd`` is
        ``(client URLs, etcd CA certificate PEM, etcd CA key PEM)`` of the etcd to store the objects in, as on Talos
        (an emulated cluster's real members: ``cluster.etcd.client_urls()``); by default an etcd embedded in the
        server's process. ``address`` is the loopback address it listens on."""
        ca_cert_pem, ca_key_pem, service_account_key_pem = (
            pem.encode() if isinstance(pem, str) else pem for pem in (ca_cert_pem, ca_key_pem, service_account_key_pem))
        state_dir = os.path.abspath(state_dir)
        os.makedirs(state_dir, exist_ok=True)
        port = port or free_port(address)

        def path(name):
            return os.path.join(state_dir, name)
        write_private(path("sa.key"), service_account_key_pem)
        ca_path, admin_cert_path, admin_key_path, kubeconfig_path = _write_credentials(
            state_dir, address, port, ca_cert_pem, ca_key_pem, ca_cert_pem)

        if etcd is None:
            storage = ["--etcd-dir", path("etcd"), "--etcd-port", str(_free_port_pair(port)), "--"]
        else:
            servers, etcd_ca_pem, etcd_ca_key_pem = etcd
            etcd_ca_pem, etcd_ca_key_pem = (pem.encode() if isinstance(pem, str) else pem for pem in (etcd_ca_pem, etcd_ca_key_pem))
            etcd_client_cert, etcd_client_key = issue_certificate(etcd_ca_pem, etcd_ca_key_pem, x509.Name([
                x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-etcd-client")]), [ExtendedKeyUsageOID.CLIENT_AUTH])
            storage = ["--", "--etcd-servers=%s" % ",".join(servers),
                       "--etcd-cafile=%s" % write_private(path("etcd-ca.crt"), etcd_ca_pem),
                       "--etcd-certfile=%s" % write_private(path("etcd-client.crt"), etcd_client_cert),
                       "--etcd-keyfile=%s" % write_private(path("etcd-client.key"), etcd_client_key)]
        command = [binary()] + storage + [
            "--secure-port=%d" % port,
            "--bind-address=%s" % address,
            "--advertise-address=%s" % address,
            # The endpoint reconciler refuses a loopback address; nothing here needs the kubernetes Service's endpoints.
            "--endpoint-reconciler-type=none",
            "--cert-dir=%s" % path("certs"),
            "--tls-cert-file=%s" % path("apiserver.crt"),
            "--tls-private-key-file=%s" % path("apiserver.key"),
            "--client-ca-file=%s" % ca_path,
            "--service-account-key-file=%s" % path("sa.key"),
            "--service-account-signing-key-file=%s" % path("sa.key"),
            "--service-account-issuer=%s" % SERVICE_ACCOUNT_ISSUER,
            "--service-cluster-ip-range=%s" % SERVICE_CLUSTER_IP_RANGE,
            "--authorization-mode=Node,RBAC",
            # Without a controller-manager nobody creates service-account tokens: pods must not need one.
            "--disable-admission-plugins=ServiceAccount",
            # kube-proxy runs privileged, as Talos's manifest asks.
            "--allow-privileged=true",
            "--profiling=false",
            # A deprecated API Kubernetes 1.38 removes, served so that a test can ask for it and see the request in
            # apiserver_requested_deprecated_apis (no deprecated API is served by default).
            "--runtime-config=resource.k8s.io/v1beta1=true",
        ]
        server = cls(state_dir, address, port, None, path("kube-apiserver.log"), ca_path, admin_cert_path, admin_key_path, kubeconfig_path)
        server.command = command
        server.client_ca_pem = ca_cert_pem
        server._launch(timeout)
        return server

    def _launch(self, timeout):
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        try:
            self._wait_ready(timeout)
            self.version = self.get("/version")["gitVersion"]
        except BaseException:
            self.stop()
            raise

    def restart(self, ca_cert_pem, ca_key_pem, client_ca_pem, timeout=90):
        """Restart with a serving (and harness admin) certificate of the CA ``ca_cert_pem``/``ca_key_pem`` and
        trusting client certificates of the CAs of ``client_ca_pem`` (PEM bundle), as Talos restarts the static pod
        after the Kubernetes CAs of the config changed."""
        ca_cert_pem, ca_key_pem, client_ca_pem = (
            pem.encode() if isinstance(pem, str) else pem for pem in (ca_cert_pem, ca_key_pem, client_ca_pem))
        self.stop()
        _write_credentials(self.state_dir, self.address, self.port, ca_cert_pem, ca_key_pem, client_ca_pem)
        self.client_ca_pem = client_ca_pem
        self._launch(timeout)
        self.restarts += 1

    def follow_cas(self, read_cas, interval=0.2):
        """Restart whenever ``read_cas()`` (called from a thread) answers differently: ``(issuing CA certificate PEM,
        its key PEM, client CA bundle PEM)`` of the control planes' configs, or None while there is nothing to serve.
        ``settled(cas)`` tells when the server runs with ``cas``."""
        stop = threading.Event()
        self._follower = {"stop": stop, "serving": read_cas(), "error": None}
        state = self._follower

        def follow():
            while not stop.wait(interval):
                try:
                    cas = read_cas()
                    if cas is not None and cas != state["serving"]:
                        if self.restart_delay and stop.wait(self.restart_delay):
                            return
                        cas = read_cas() or cas
                        self.restart(*cas)
                        state["serving"] = cas
                except Exception as error:  # reported by settled(): a thread has no one else to tell
                    state["error"] = error
                    return

        state["thread"] = threading.Thread(target=follow, daemon=True, name="kube-apiserver-cas")
        state["thread"].start()

    def settled(self, cas):
        """Whether the server runs with ``cas`` (see ``follow_cas``); raises what stopped the follower."""
        if self._follower["error"] is not None:
            raise self._follower["error"]
        return self._follower["serving"] == cas

    def _ssl_context(self):
        context = ssl.create_default_context(cafile=self.ca_path)
        context.load_cert_chain(self._admin_cert_path, self._admin_key_path)
        return context

    def _request(self, path, timeout=5):
        connection = http.client.HTTPSConnection(self.address, self.port, context=self._ssl_context(), timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def get(self, path):
        """GET ``path`` as the admin; the decoded JSON body (KubeAPIServerError unless 200)."""
        status, body = self._request(path)
        if status != 200:
            raise KubeAPIServerError("GET %s answered %d: %s" % (path, status, body[:500].decode("utf-8", "replace")))
        return json.loads(body)

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            if self.process.poll() is not None:
                raise KubeAPIServerError("the test Kubernetes API server exited with %d before it was ready; log tail (%s):\n%s"
                                         % (self.process.returncode, self.log_path, log_tail(self.log_path)))
            try:
                status, body = self._request("/readyz")
                if status == 200:
                    return
                last = "/readyz answered %d: %s" % (status, body[-300:].decode("utf-8", "replace"))
            except (OSError, http.client.HTTPException) as error:
                last = "%s: %s" % (type(error).__name__, error)
            if time.monotonic() > deadline:
                raise KubeAPIServerError("the test Kubernetes API server was not ready within %ss (%s); log tail (%s):\n%s"
                                         % (timeout, last, self.log_path, log_tail(self.log_path)))
            time.sleep(0.2)

    def stop(self):
        """Stop the server (and its etcd). Safe to call twice."""
        follower = self._follower
        if follower is not None and threading.current_thread() is not follower["thread"]:
            # A restart under way finishes first: stopping in its middle would leave the new process behind.
            follower["stop"].set()
            follower["thread"].join(timeout=120)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _write_credentials(state_dir, address, port, ca_cert_pem, ca_key_pem, client_ca_pem):
    """The serving certificate and the harness's admin certificate of the CA ``ca_cert_pem``/``ca_key_pem``, and the
    client CA bundle ``client_ca_pem``, written for the server's flags; returns the paths of the CA bundle, the
    admin certificate and key, and the admin kubeconfig."""
    sans = [x509.DNSName(name) for name in _SERVING_NAMES] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(set(_SERVING_IPS + (address,)))]
    serving_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    # Valid for a year, as the serving certificate Talos issues: a certificate report finds nothing about to expire.
    serving_cert, serving_key = issue_certificate(ca_cert_pem, ca_key_pem, serving_subject, [ExtendedKeyUsageOID.SERVER_AUTH], sans,
                                                  days=365)
    admin_subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                               x509.NameAttribute(NameOID.COMMON_NAME, "admin")])
    admin_cert, admin_key = issue_certificate(ca_cert_pem, ca_key_pem, admin_subject, [ExtendedKeyUsageOID.CLIENT_AUTH])

    def path(name):
        return os.path.join(state_dir, name)
    # ca.crt is the client CA bundle; the harness's own client trusts it too (the serving CA is one of them).
    ca_path = write_private(path("ca.crt"), client_ca_pem)
    write_private(path("apiserver.crt"), serving_cert)
    write_private(path("apiserver.key"), serving_key)
    admin_cert_path = write_private(path("admin.crt"), admin_cert)
    admin_key_path = write_private(path("admin.key"), admin_key)
    kubeconfig_path = write_private(path("kubeconfig"), _admin_kubeconfig(address, port, ca_path, admin_cert_path, admin_key_path))
    return ca_path, admin_cert_path, admin_key_path, kubeconfig_path


def _admin_kubeconfig(address, port, ca_path, cert_path, key_path):
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": "https://%s:%d" % (address, port), "certificate-authority": ca_path}}],
        "users": [{"name": "admin", "user": {"client-certificate": cert_path, "client-key": key_path}}],
        "contexts": [{"name": "admin@test", "context": {"cluster": "test", "user": "admin"}}],
        "current-context": "admin@test",
    }
    return yaml.safe_dump(document, sort_keys=False).encode()
