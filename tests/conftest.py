# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared pytest setup: import paths for the collection and the emulator, and the ``emulator`` fixture."""

import os
import sys

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_TESTS)


def _collection_paths():
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    paths = [path for path in (configured or "").split(os.pathsep) if path]
    return paths or [os.path.join(_REPO, ".collections")]


_TEST_DIRS = ("emulator", "unit", "integration", "robustness")
# _TESTS itself for the test packages (image_factory).
for _path in _collection_paths() + [_TESTS] + [os.path.join(_TESTS, name) for name in _TEST_DIRS]:
    if _path not in sys.path:
        sys.path.insert(0, _path)

from talos_emulator import EmulatedCluster  # noqa: E402  (needs the paths above)


def _started_clusters(base_dir):
    """A factory starting clusters under ``base_dir`` and the list of what it started."""
    clusters = []

    def start(controlplanes=1, workers=0, maintenance=False, talos_version="v1.14.0", reboot_seconds=0.3, **options):
        state_dir = base_dir / ("cluster-%d" % len(clusters))
        cluster = EmulatedCluster.start(
            str(state_dir), controlplanes=controlplanes, workers=workers, maintenance=maintenance,
            talos_version=talos_version, reboot_seconds=reboot_seconds, **options
        )
        clusters.append(cluster)
        return cluster

    return start, clusters


@pytest.fixture
def emulator(tmp_path):
    """Factory for started emulated clusters, each in its own state directory, stopped at teardown.

    ``emulator(controlplanes=1, workers=0, maintenance=False, talos_version="v1.14.0",
    reboot_seconds=0.3, bootstrapped=False, name="emulated", node_versions=None)`` returns an
    ``EmulatedCluster`` (see docs/emulator.md).
    """
    start, clusters = _started_clusters(tmp_path)
    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="module")
def module_emulator(tmp_path_factory):
    """As ``emulator``, for clusters that the tests of one module share (stopped after the module)."""
    start, clusters = _started_clusters(tmp_path_factory.mktemp("emulated"))
    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture(scope="session")
def kube_apiserver_factory(tmp_path_factory):
    """Factory for real Kubernetes API servers (tests/kube_apiserver), each stopped by ``.stop()`` or at the end
    of the session.

    ``kube_apiserver_factory(ca_cert_pem, ca_key_pem, service_account_key_pem, port=None, etcd=None)`` returns a
    started ``KubeAPIServer`` (``.url``, ``.version``, ``.kubeconfig_path``, ``.stop()``) trusting that Kubernetes CA
    (the cluster's: ``cluster.secrets.k8s_ca``); ``etcd`` (client URLs, etcd CA certificate and key) is where it
    stores its objects, an embedded etcd by default (see ``KubeAPIServer.start``). The first call builds the server
    from Go modules; without Go the test fails.
    """
    from kube_apiserver import KubeAPIServer

    servers = []

    def start(ca_cert_pem, ca_key_pem, service_account_key_pem, port=None, etcd=None):
        state_dir = tmp_path_factory.mktemp("kube-apiserver")
        server = KubeAPIServer.start(str(state_dir), ca_cert_pem, ca_key_pem, service_account_key_pem, port=port, etcd=etcd)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def image_factory(tmp_path):
    """Factory for local Image Factories (tests/image_factory), stopped at teardown.

    ``image_factory(tls=False, versions=None)`` returns a started ``ImageFactoryServer``
    (``.url``, ``.requests``, ``.schematics``, ``.add_schematic(document)``); with
    ``tls=True`` it serves HTTPS and ``.ca_path`` is the CA that signed its certificate.
    """
    from image_factory import ImageFactoryServer, write_tls_files

    servers = []

    def start(tls=False, versions=None):
        tls_files = write_tls_files(tmp_path) if tls else None
        server = ImageFactoryServer(tls_files=tls_files[1:] if tls_files else None, versions=versions).start()
        server.ca_path = tls_files[0] if tls_files else None
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


_INTEGRATION = os.path.join(_TESTS, "integration") + os.sep


def pytest_collection_modifyitems(items):
    """Every test under tests/integration is marked ``integration`` (tests/run-all runs ``not integration or once``
    on the default stack, the rest on the other stacks), and the files marked ``long`` run first: pytest-xdist hands
    out files in this order, so the long ones no longer start last and keep one core busy alone at the end."""
    for item in items:
        if str(item.fspath).startswith(_INTEGRATION):
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
