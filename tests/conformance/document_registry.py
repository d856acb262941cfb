#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's registry of config documents (config/documents.py) as JSON, for the harness to judge against the
registry and decoder of upstream's machinery: ``{"kinds": {kind: since}, "fields": {kind: [[path, [first, ...]]]}}``."""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _path in (os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.path.join(REPO, ".collections")).split(os.pathsep):
    if _path and _path not in sys.path:
        sys.path.insert(0, _path)

from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents  # noqa: E402

json.dump({"kinds": documents.KIND_SINCE, "fields": documents.FIELD_SINCE}, sys.stdout)
