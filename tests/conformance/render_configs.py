#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the conformance harness asks the collection to generate.

    render_configs.py plan OUT_DIR
    render_configs.py render OUT_DIR

``plan`` writes OUT_DIR/manifest.json: one entry per supported version contract,
machine type and patch set (and, unpatched, once more with with_docs and
with_examples, and from v1.14 once more with the installer in .machine.install,
install_home machine), with the inputs and the defaults talos_machine_config
fills in (Kubernetes version, installer image), so that Talos's own generator can
be given the same inputs; ``module_samples`` are the entries render_configs.yml
renders through the module itself. ``render`` then renders every entry from
OUT_DIR/secrets.yaml (made by talos_machine_secrets) with the code the module
runs, far faster than one module run per config; the harness checks that the
module's samples are byte-identical to these.
"""

import json
import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _path in (os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.path.join(REPO, ".collections")).split(os.pathsep):
    if _path and _path not in sys.path:
        sys.path.insert(0, _path)

from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import (  # noqa: E402
    SUPPORTED_CONTRACTS, contract_name, default_installer_image, kubernetes_version,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.config.installer_reference import UNATTENDED_INSTALL_SINCE  # noqa: E402
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle  # noqa: E402

CLUSTER_NAME = "conformance"
CLUSTER_ENDPOINT = "https://cp.conformance.example:6443"
INSTALL_DISK = "/dev/sda"
ADDITIONAL_SANS = ["cp.conformance.example", "10.5.0.2"]

# Patches a user typically writes: one merged into the v1alpha1 document for every
# contract, a JSON patch where the config is a single document (talosctl refuses
# JSON patches on multi-document configs, v1.12 on), and from v1.14 one merged into
# a named document.
V1ALPHA1_PATCH = {"machine": {"env": {"HTTPS_PROXY": "http://proxy.conformance.example:3128"}}}
JSON_PATCH = [{"op": "add", "path": "/machine/certSANs/-", "value": "api.conformance.example"}]
KUBE_NODE_PATCH = {"apiVersion": "v1alpha1", "kind": "KubeNodeConfig", "labels": {"conformance.example/rack": "r1"}}


def patches(contract):
    chosen = [V1ALPHA1_PATCH]
    if contract < (1, 12):
        chosen.append(JSON_PATCH)
    if contract >= (1, 14):
        chosen.append(KUBE_NODE_PATCH)
    return chosen


def plan():
    configs = []
    for contract in SUPPORTED_CONTRACTS:
        version = contract_name(contract)
        # The other installer home than the contract's default, where there is one.
        other_home = ("-machine-install",) if contract >= UNATTENDED_INSTALL_SINCE else ()
        for machine_type in config_generation.MACHINE_TYPES:
            for variant in ("", "-patched", "-documented") + other_home:
                chosen = patches(contract) if variant == "-patched" else []
                configs.append({
                    "file": "%s-%s%s.yaml" % (version, machine_type, variant),
                    "contract": version, "machine_type": machine_type,
                    "with_docs": variant == "-documented", "with_examples": variant == "-documented",
                    "cluster_name": CLUSTER_NAME, "cluster_endpoint": CLUSTER_ENDPOINT,
                    "kubernetes_version": kubernetes_version(None, contract),
                    "install_disk": INSTALL_DISK, "install_image": default_installer_image(version),
                    "install_home": "machine" if variant == "-machine-install" else None,
                    "additional_sans": ADDITIONAL_SANS,
                    "patches": chosen,
                    "patches_yaml": [yaml.safe_dump(patch, sort_keys=False) for patch in chosen],
                })
    # The newest and the last single-document contract, patched, one commented config and one with the
    # other installer home go through the module.
    samples = [entry for entry in configs if entry["file"] in (
        "v1.14-controlplane-patched.yaml", "v1.11-worker-patched.yaml", "v1.13-controlplane-documented.yaml",
        "v1.14-worker-machine-install.yaml")]
    return {"secrets": "secrets.yaml", "configs": configs, "module_samples": samples}


def render(out_dir, manifest):
    """Every planned config, as talos_machine_config renders it (GenerationInput, then render)."""
    bundle = SecretsBundle.load(os.path.join(out_dir, manifest["secrets"]))
    for entry in manifest["configs"]:
        gen = config_generation.GenerationInput(
            bundle, entry["machine_type"], entry["cluster_name"], entry["cluster_endpoint"],
            talos_version=entry["contract"], install_disk=entry["install_disk"], additional_sans=entry["additional_sans"],
            install_home=entry["install_home"])
        with open(os.path.join(out_dir, entry["file"]), "w") as handle:
            handle.write(config_generation.render(gen, entry["patches"], with_docs=entry["with_docs"],
                                                  with_examples=entry["with_examples"]))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("plan", "render"):
        sys.exit(__doc__)
    out_dir = sys.argv[2]
    path = os.path.join(out_dir, "manifest.json")
    if sys.argv[1] == "plan":
        with open(path, "w") as handle:
            json.dump(plan(), handle, indent=1)
    else:
        with open(path) as handle:
            render(out_dir, json.load(handle))


if __name__ == "__main__":
    main()
