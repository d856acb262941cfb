#!/usr/bin/env python
"""Write the execution environment of docs/awx/execution-environment.yml with the
collection from a local build instead of Galaxy.

``make ee-local`` runs it after ``make build``: BUILD_DIR/execution-environment.yml
installs BUILD_DIR/talos_linux-talos-<version>.tar.gz (the version of galaxy.yml)
and is otherwise the same definition. Build the image from it with
``ansible-builder build -f BUILD_DIR/execution-environment.yml -t talos-ee:dev``.

Usage: python tools/local_execution_environment.py BUILD_DIR
"""

import os
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFINITION = os.path.join(ROOT, "docs", "awx", "execution-environment.yml")
# additional_build_files copy the tarball here in the build context, the directory ansible-galaxy
# runs in while the image is built.
CONTEXT_DIR = "collections"


def main(build_dir):
    with open(os.path.join(ROOT, "galaxy.yml")) as galaxy:
        manifest = yaml.safe_load(galaxy)
    tarball = "%s-%s-%s.tar.gz" % (manifest["namespace"], manifest["name"], manifest["version"])
    if not os.path.isfile(os.path.join(build_dir, tarball)):
        sys.exit("%s is not in %s: run make build first." % (tarball, build_dir))
    with open(DEFINITION) as definition_file:
        definition = yaml.safe_load(definition_file)
    definition["dependencies"]["galaxy"] = {"collections": [{"name": "%s/%s" % (CONTEXT_DIR, tarball), "type": "file"}]}
    # A path relative to the definition, which lies next to the tarball.
    definition["additional_build_files"] = [{"src": tarball, "dest": CONTEXT_DIR}]
    path = os.path.join(build_dir, "execution-environment.yml")
    with open(path, "w") as output:
        output.write("---\n# Written by tools/local_execution_environment.py from docs/awx/execution-environment.yml:\n"
                     "# the same image with the collection from %s.\n" % tarball)
        yaml.safe_dump(definition, output, sort_keys=False)
    print("%s: build the image with ansible-builder build -f %s -t talos-ee:dev" % (path, path))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1])
