#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection migrates configs upstream's generator made, for the harness to judge (migration_test.go).

    migrate_configs.py DIR

For every DIR/NAME.yaml, config/migration.py's plan: DIR/NAME.migrated.yaml when it has one, and on stdout a JSON
object ``{NAME.yaml: {"refusal": sentence or null, "steps": [{"from", "to", "field"}], "dropped": [...]}}``.
"""

import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _path in (os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.path.join(REPO, ".collections")).split(os.pathsep):
    if _path and _path not in sys.path:
        sys.path.insert(0, _path)

from ansible_collections.talos_linux.talos.plugins.module_utils.config import migration  # noqa: E402


def main(directory):
    report = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".yaml") or name.endswith(".migrated.yaml"):
            continue
        with open(os.path.join(directory, name)) as stream:
            plan = migration.plan_text(stream.read(), name)
        shown = plan.as_dict()
        report[name] = {"refusal": plan.refusal(), "dropped": shown["dropped"],
                        "steps": [dict((key, step[key]) for key in ("from", "to", "field")) for step in shown["steps"]]}
        if plan.refusal() is None and plan.changes:
            with open(os.path.join(directory, name[:-len(".yaml")] + ".migrated.yaml"), "w") as stream:
                stream.write(migration.migrated_config(plan).data.decode("utf-8"))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
