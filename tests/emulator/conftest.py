# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the emulator's own tests: API clients bound to a cluster."""

import pytest

from emulator_client import ApiClient


@pytest.fixture
def api():
    """Factory ``api(cluster, role="admin", talosconfig=None, insecure=False, context=None)`` -> ApiClient."""
    clients = []

    def make(cluster, **options):
        client = ApiClient(cluster, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
