# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ControllerModule: the AnsibleModule of modules that work on the controller only.

talos_machine_secrets, talos_machine_config and talos_client_config make files
from a secrets bundle and talk to no node, so they take none of the
connection options (and are not in the ``talos`` action group, whose
``module_defaults`` would hand them options they do not accept).
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import importlib
import importlib.util
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import TalosError

# (name on PyPI, module to import) for the generators.
GENERATOR_LIBRARIES = (
    ("PyYAML", "yaml"),
    ("cryptography", "cryptography.x509"),
)


def missing_libraries(libraries):
    """``[(pypi_name, traceback_text)]`` for every library of ``libraries`` that cannot be imported.

    A library that is installed is found without being imported (a task
    imports only what its calls need); one that is not is imported to get
    the traceback that names what is missing.
    """
    missing = []
    for pypi_name, module_name in libraries:
        try:
            if importlib.util.find_spec(module_name) is not None:
                continue
        except (ImportError, ValueError):
            pass
        try:
            importlib.import_module(module_name)
        except ImportError:
            missing.append((pypi_name, traceback.format_exc()))
    return missing


class ControllerModule(AnsibleModule):
    """An AnsibleModule that reports missing generator libraries and turns TalosError into fail_json."""

    def __init__(self, libraries=GENERATOR_LIBRARIES, **kwargs):
        super(ControllerModule, self).__init__(**kwargs)
        missing = missing_libraries(libraries)
        if missing:
            self.fail_json(msg=missing_required_lib(", ".join(name for name, _tb in missing)), exception=missing[0][1])

    def run(self, fn):
        """Call ``fn(self)``; a TalosError becomes fail_json with its one-sentence message."""
        try:
            fn(self)
        except TalosError as error:
            self.fail_json(msg=error.message, **error.to_result())
