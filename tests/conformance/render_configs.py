#!/usr/bin/env python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render what the collection generates, for the conformance harness to judge.

    render_configs.py configs OUT_DIR
    render_configs.py talosconfig OUT_FILE STATE_DIR

``configs`` writes OUT_DIR/secrets.yaml (a new bundle, as talos_machine_secrets
makes it), one machine config per supported version contract, machine type and
patch set (as talos_machine_config renders it) and OUT_DIR/manifest.json naming
each config with the inputs it was rendered from, so the harness can render the
same with Talos's own generator. ``talosconfig`` writes a talosconfig (as
talos_client_config does) from the secrets bundle of the emulated cluster in
STATE_DIR, whose endpoint is that cluster's first control plane.
"""

import argparse
import json
import os
import sys

import yaml

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_paths():
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or ""
    paths = [path for path in configured.split(os.pathsep) if path] or [os.path.join(os.path.dirname(TESTS), ".collections")]
    for path in paths:
        if path not in sys.path:
            sys.path.insert(0, path)


_import_paths()

from ansible_collections.talos_linux.talos.plugins.module_utils import client_config, config_generation  # noqa: E402
from ansible_collections.talos_linux.talos.plugins.module_utils.config_contract import (  # noqa: E402
    SUPPORTED_CONTRACTS, contract_name, default_installer_image, kubernetes_version,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.secrets_bundle import SecretsBundle  # noqa: E402

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


def render(out_dir):
    bundle = SecretsBundle.generate()
    secrets_path = os.path.join(out_dir, "secrets.yaml")
    with open(secrets_path, "w") as handle:
        handle.write(bundle.to_yaml())
    manifest = {"secrets": "secrets.yaml", "configs": []}
    for contract in SUPPORTED_CONTRACTS:
        version = contract_name(contract)
        for machine_type in config_generation.MACHINE_TYPES:
            for patched in (False, True):
                chosen = patches(contract) if patched else []
                text = config_generation.generate_machine_config(
                    bundle, machine_type, CLUSTER_NAME, CLUSTER_ENDPOINT, talos_version=version,
                    install_disk=INSTALL_DISK, additional_sans=ADDITIONAL_SANS, config_patches=chosen or None,
                )
                name = "%s-%s%s.yaml" % (version, machine_type, "-patched" if patched else "")
                with open(os.path.join(out_dir, name), "w") as handle:
                    handle.write(text)
                manifest["configs"].append({
                    "file": name, "contract": version, "machine_type": machine_type,
                    "cluster_name": CLUSTER_NAME, "cluster_endpoint": CLUSTER_ENDPOINT,
                    "kubernetes_version": kubernetes_version(None, contract),
                    "install_disk": INSTALL_DISK, "install_image": default_installer_image(version),
                    "additional_sans": ADDITIONAL_SANS,
                    "patches": [yaml.safe_dump(patch, sort_keys=False) for patch in chosen],
                })
    with open(os.path.join(out_dir, "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1)


def render_talosconfig(out_file, state_dir):
    with open(os.path.join(state_dir, "state.json")) as handle:
        state = json.load(handle)
    bundle = SecretsBundle.load(os.path.join(state_dir, "secrets.yaml"))
    text, _issued, _crt = client_config.render_talosconfig(bundle, state["name"], endpoints=[state["endpoint"]])
    with open(out_file, "w") as handle:
        handle.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    configs = commands.add_parser("configs")
    configs.add_argument("out_dir")
    talosconfig = commands.add_parser("talosconfig")
    talosconfig.add_argument("out_file")
    talosconfig.add_argument("state_dir")
    args = parser.parse_args()
    if args.command == "configs":
        render(args.out_dir)
    else:
        render_talosconfig(args.out_file, args.state_dir)


if __name__ == "__main__":
    main()
