# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """How the modules that talk to an Image Factory reach it."""

    DOCUMENTATION = r'''
options:
  image_factory_url:
    description:
      - Base URL of the Image Factory, for example a self-hosted one at an air-gapped site.
      - Its host (and port) is also the registry its installer images are pulled from.
      - Falls back to the environment variable E(TALOS_IMAGE_FACTORY_URL).
    type: str
    default: https://factory.talos.dev
  ca_path:
    description:
      - PEM file with the CA certificates that may sign the factory's TLS certificate, instead of the system's.
      - Falls back to the environment variables E(REQUESTS_CA_BUNDLE) and E(SSL_CERT_FILE), in that order.
    type: path
  validate_certs:
    description:
      - Verify the factory's TLS certificate. Set to V(false) only for a test factory.
    type: bool
    default: true
  use_proxy:
    description:
      - Go through the proxy the environment names (E(HTTPS_PROXY), E(HTTP_PROXY); E(NO_PROXY) lists the hosts
        reached directly), as every Ansible HTTP client does. The task's C(environment) keyword sets them.
    type: bool
    default: true
  timeout:
    description:
      - Seconds one request to the factory may take.
    type: int
    default: 30
notes:
  - An unreachable factory, a certificate that cannot be verified, or a request the factory refuses fails the task
    with one sentence naming the factory URL and the cause.
'''
