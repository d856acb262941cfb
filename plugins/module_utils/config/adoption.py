# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Adopting a running cluster: what the collection must be given to render every node's running config.

From the running configs of a cluster's nodes (however they were made:
talosctl, talhelper, Omni, Terraform), ``plan_adoption`` finds the secrets
bundle (from a control plane's config, after checking that every node belongs
to one cluster), the settings ``talos_machine_config`` renders the configs from
(cluster name, endpoint, version contract, Kubernetes version, installer and
install disk) and, per node, the smallest patches that make the rendering equal
to what the node runs: those every node of a machine type shares for the
group, the rest for the node. The settings are chosen among every supported
contract not newer than the oldest Talos the nodes run (and the install homes
and extra SANs a config can have) as the ones that need the smallest patches.

``inventory_files`` lays the plan out as the cluster role reads it: an
inventory in the guides' layout, group variables with the settings and the
groups' patches, host variables with each node's.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import binascii
import json
import re

try:
    import yaml
except ImportError:  # reported by the module through missing_required_lib
    yaml = None

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, label
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation
from ansible_collections.talos_linux.talos.plugins.module_utils.config import smallest_patch
from ansible_collections.talos_linux.talos.plugins.module_utils.config.contract import SUPPORTED_CONTRACTS, contract_name
from ansible_collections.talos_linux.talos.plugins.module_utils.config.installer_reference import (
    UNATTENDED_INSTALL_KIND, UNATTENDED_INSTALL_SINCE,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.config.running import CONTROLPLANE, WORKER
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes import node as talos_node

# The disk selector talosctl writes for an install disk (generation.py): the path, JSON-quoted.
_DISK_SELECTOR = re.compile(r'^\s*disk\.dev_path\s*==\s*("(?:[^"\\]|\\.)*")\s*$')
_IMAGE_TAG = re.compile(r":v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$")


# -- one cluster ---------------------------------------------------------------

def _pem_of_b64(value):
    try:
        return base64.b64decode(value, validate=True).decode("utf-8").strip() if value else None
    except (binascii.Error, ValueError):
        return str(value)


def _pem(value):
    return value.strip() if isinstance(value, str) and value.strip() else None


def cluster_identity(config):
    """What makes a node part of its cluster, by what a sentence calls it: ``{name: value}`` (None when absent).

    Every node carries the cluster ID and the Talos API CA; control planes also the Kubernetes and etcd CAs.
    """
    identity = {
        "cluster ID": config.document("DiscoveryIdentityConfig").get("clusterID") or config.section("cluster", "id"),
        "Talos API CA": _pem_of_b64(config.section("machine", "ca", "crt")),
    }
    if config.machine_type == CONTROLPLANE:
        issuing = config.document("KubeAPIServerCAConfig").get("issuingCA") or {}
        identity["Kubernetes CA"] = _pem(issuing.get("cert")) or _pem_of_b64(config.section("cluster", "ca", "crt"))
        identity["etcd CA"] = _pem_of_b64(config.section("cluster", "etcd", "ca", "crt"))
    return identity


def _plural(names):
    names = ["%ss" % name for name in names]
    return names[0] if len(names) == 1 else "%s and %s" % (", ".join(names[:-1]), names[-1])


def check_one_cluster(configs):
    """Refuse nodes that are not one cluster (the control planes before the workers), in one sentence."""
    ordered = ([config for config in configs if config.machine_type == CONTROLPLANE]
               + [config for config in configs if config.machine_type == WORKER])
    identities = [(config, cluster_identity(config)) for config in ordered]
    for position, (config, identity) in enumerate(identities):
        for reference, known in identities[:position]:
            differ = [name for name, value in identity.items()
                      if value is not None and known.get(name) is not None and known[name] != value]
            if differ:
                who = "The control planes" if config.machine_type == CONTROLPLANE else "The nodes"
                raise TalosConfigError(
                    "%s disagree: %s and %s have different %s, so they are not one cluster and no one secrets bundle "
                    "renders both; adopt each cluster with its own nodes." % (who, label(reference.node), label(config.node),
                                                                              _plural(differ)))


def bundle_matches(bundle, configs):
    """Whether ``bundle`` is the secrets bundle of the cluster ``configs`` belong to (same CAs and cluster ID)."""
    controlplane = next((config for config in configs if config.machine_type == CONTROLPLANE), None)
    if controlplane is None:
        return False
    identity = cluster_identity(controlplane)
    expected = {
        "cluster ID": bundle.cluster_id,
        "Talos API CA": bundle.os_ca.crt_pem.strip(),
        "Kubernetes CA": bundle.cas["k8s"].crt_pem.strip(),
        "etcd CA": bundle.cas["etcd"].crt_pem.strip(),
    }
    return all(identity[name] in (None, value) for name, value in expected.items())


# -- the settings talos_machine_config renders from ------------------------------

def _majority(values):
    counted = {}
    for value in values:
        if value is not None:
            counted[value] = counted.get(value, 0) + 1
    return max(counted, key=lambda value: counted[value]) if counted else None


def _install(config):
    """``(disk, image, home)`` of a running config's installer."""
    unattended = config.document(UNATTENDED_INSTALL_KIND)
    if unattended:
        match = _DISK_SELECTOR.match(str(((unattended.get("provisioning") or {}).get("diskSelector") or {}).get("match") or ""))
        disk = json.loads(match.group(1)) if match else None
        return disk, (unattended.get("installer") or {}).get("image"), "unattended"
    install = config.section("machine", "install") or {}
    return install.get("disk"), install.get("image"), "machine"


def _kubernetes_version(config):
    image = config.document("KubeletConfig").get("image") or config.section("machine", "kubelet", "image") or ""
    match = _IMAGE_TAG.search(str(image))
    return match.group(1) if match else None


def _contracts(configs):
    """The contracts a rendering may use: every supported one not newer than the oldest Talos the nodes run."""
    releases = [talos_node.parse_version(config.talos_version) for config in configs]
    oldest = min((release[:2] for release in releases if release is not None), default=None)
    contracts = [contract for contract in SUPPORTED_CONTRACTS if oldest is None or contract <= oldest]
    if not contracts:
        raise TalosConfigError("The nodes run Talos %s, older than every version the collection supports (%s): upgrade "
                               "them first." % (contract_name(oldest), contract_name(SUPPORTED_CONTRACTS[0])))
    return contracts


class Settings:
    """The inputs of one rendering of the cluster's configs (talos_machine_config's options)."""

    def __init__(self, cluster_name, cluster_endpoint, contract, kubernetes_version, install_disk, install_image,
                 install_home, additional_sans):
        self.cluster_name = cluster_name
        self.cluster_endpoint = cluster_endpoint
        self.contract = contract
        self.kubernetes_version = kubernetes_version
        self.install_disk = install_disk
        self.install_image = install_image
        self.install_home = install_home
        self.additional_sans = list(additional_sans)

    @property
    def talos_version(self):
        return contract_name(self.contract)

    def generation_input(self, bundle, machine_type):
        return generation.GenerationInput(
            bundle, machine_type, self.cluster_name, self.cluster_endpoint, talos_version=self.talos_version,
            kubernetes_version=self.kubernetes_version, install_disk=self.install_disk or None,
            install_image=self.install_image or None, additional_sans=self.additional_sans, install_home=self.install_home)

    def render(self, bundle, machine_type):
        """The config text talos_machine_config writes for these settings."""
        return generation.render(self.generation_input(bundle, machine_type))

    def facts(self):
        """The settings as the cluster role's variables name them (without the ``cluster_`` prefix)."""
        return {
            "name": self.cluster_name,
            "endpoint": self.cluster_endpoint,
            "talos_version": self.talos_version,
            "kubernetes_version": self.kubernetes_version or "",
            "install_disk": self.install_disk or "",
            "install_image": self.install_image or "",
            "install_home": self.install_home,
            "additional_sans": list(self.additional_sans),
        }


def candidate_settings(configs):
    """Every rendering worth trying for ``configs``, the likeliest first."""
    controlplanes = [config for config in configs if config.machine_type == CONTROLPLANE] or configs
    name = _majority(config.document("KubeClusterConfig").get("clusterName") or config.section("cluster", "clusterName")
                     for config in controlplanes)
    endpoint = _majority(config.document("KubeClusterConfig").get("endpoint") or config.section("cluster", "controlPlane", "endpoint")
                         for config in controlplanes)
    if not name or not endpoint:
        raise TalosConfigError("The control planes' running configs name no cluster %s: they cannot be rendered again."
                               % ("name" if not name else "endpoint"))
    installs = [_install(config) for config in configs]
    disk = _majority(install[0] for install in installs)
    image = _majority(install[1] for install in installs)
    home = _majority(install[2] for install in installs)
    kubernetes_version = _majority(_kubernetes_version(config) for config in configs)
    sans = _majority(tuple(config.section("machine", "certSANs") or ()) for config in controlplanes) or ()
    candidates = []
    for contract in reversed(_contracts(configs)):
        # Before the UnattendedInstallConfig document, the installer has one home.
        homes = [home, "machine" if home == "unattended" else "unattended"] if contract >= UNATTENDED_INSTALL_SINCE else ["machine"]
        for install_home in homes:
            for additional_sans in ([list(sans), []] if sans else [[]]):
                candidates.append(Settings(name, endpoint, contract, kubernetes_version, disk, image, install_home, additional_sans))
    return candidates


# -- the plan --------------------------------------------------------------------

class AdoptionPlan:
    """What renders the running cluster again: the bundle, the settings, the rendered configs and the patches.

    ``group_patches`` maps each machine type to the patches every node of it
    shares; ``host_patches`` each node to its own; ``rendered`` each machine
    type to the config text talos_machine_config writes; ``mismatches`` each
    node whose running config the patches do not reproduce exactly to the paths
    that still differ (a value a merge patch cannot set, such as an explicit
    null).
    """

    def __init__(self, bundle, settings, configs, rendered, group_patches, host_patches, mismatches):
        self.bundle = bundle
        self.settings = settings
        self.configs = configs
        self.rendered = rendered
        self.group_patches = group_patches
        self.host_patches = host_patches
        self.mismatches = mismatches

    def patches_for(self, config):
        return self.group_patches.get(config.machine_type, []) + self.host_patches[config.node]


def _rendered_documents(settings, bundle, machine_types):
    return dict((machine_type, generation.generate_documents(settings.generation_input(bundle, machine_type)))
                for machine_type in machine_types)


def _node_patches(configs, rendered):
    # Nodes with the same config get the same patches: computed once.
    by_text, patches = {}, {}
    for config in configs:
        key = (config.machine_type, config.text)
        if key not in by_text:
            by_text[key] = smallest_patch.smallest_patches(rendered[config.machine_type], config.documents)
        patches[config.node] = by_text[key]
    return patches


def _factor_groups(configs, rendered, patches):
    """Move what every node of a machine type shares into the group's patches, where that makes them smaller."""
    group_patches, host_patches = {}, dict(patches)
    for machine_type in (CONTROLPLANE, WORKER):
        members = [config for config in configs if config.machine_type == machine_type]
        if len(members) < 2:
            continue
        shared = smallest_patch.common_patches([patches[config.node] for config in members], rendered[machine_type])
        if not shared:
            continue
        base = smallest_patch.patched(rendered[machine_type], shared)
        factored = dict((config.node, smallest_patch.smallest_patches(base, config.documents)) for config in members)
        before = sum(smallest_patch.patch_size(patches[config.node]) for config in members)
        after = smallest_patch.patch_size(shared) + sum(smallest_patch.patch_size(factored[config.node]) for config in members)
        if after <= before:
            group_patches[machine_type] = shared
            host_patches.update(factored)
    return group_patches, host_patches


def controlplane_bundle(configs, talos_version):
    """The secrets bundle from the first control plane's running config (what it lacks generated)."""
    controlplane = next((config for config in configs if config.machine_type == CONTROLPLANE), None)
    if controlplane is None:
        raise TalosConfigError("None of the nodes is a control plane, and only a control plane's config carries the cluster's "
                               "CA keys: list the control planes in nodes too.")
    return SecretsBundle.from_controlplane_config(controlplane.text, "of %s" % label(controlplane.node), talos_version)


def plan_adoption(configs, bundle=None, bundle_source="The secrets bundle"):
    """The AdoptionPlan of ``configs`` (RunningConfig of every node); ``bundle`` is the cluster's when one exists.

    Refuses nodes of more than one cluster, and a ``bundle`` of another cluster (``bundle_source`` names it).
    """
    if not configs:
        raise TalosConfigError("No node to adopt: list the cluster's nodes in nodes.")
    check_one_cluster(configs)
    candidates = candidate_settings(configs)
    if bundle is None:
        bundle = controlplane_bundle(configs, candidates[0].talos_version)
    elif not bundle_matches(bundle, configs):
        raise TalosConfigError("%s is the secrets bundle of another cluster (its CAs or cluster ID differ from the control "
                               "planes'): move it away, or adopt the cluster into another directory." % bundle_source)
    machine_types = sorted(set(config.machine_type for config in configs))
    best = None
    for settings in candidates:
        rendered = _rendered_documents(settings, bundle, machine_types)
        patches = _node_patches(configs, rendered)
        size = sum(smallest_patch.patch_size(node_patches) for node_patches in patches.values())
        # Candidates come newest contract first: a later one wins only with smaller patches.
        if best is None or size < best[0]:
            best = (size, settings, rendered, patches)
    _size, settings, rendered, patches = best
    group_patches, host_patches = _factor_groups(configs, rendered, patches)
    mismatches = {}
    for config in configs:
        result = smallest_patch.patched(rendered[config.machine_type],
                                        group_patches.get(config.machine_type, []) + host_patches[config.node])
        remaining = smallest_patch.differences(result, config.documents)
        if remaining:
            mismatches[config.node] = remaining
    texts = dict((machine_type, settings.render(bundle, machine_type)) for machine_type in (CONTROLPLANE, WORKER))
    return AdoptionPlan(bundle, settings, configs, texts, group_patches, host_patches, mismatches)


# -- the files the cluster role reads -------------------------------------------

class _AnsibleDumper(getattr(yaml, "SafeDumper", object)):
    """Block-style YAML for Ansible's inventory and variable files; text that Jinja would template is ``!unsafe``."""

    def increase_indent(self, flow=False, indentless=False):
        # Sequences indented under their key, as the guides write them.
        return super(_AnsibleDumper, self).increase_indent(flow, False)


def _represent_text(dumper, text):
    # A config's text that looks like Jinja (a Helm template in an inline manifest) stays as it is.
    if "{{" in text or "{%" in text or "{#" in text:
        return dumper.represent_scalar("!unsafe", text, style="|" if "\n" in text else None)
    if "\n" in text:
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
    return dumper.represent_str(text)


class Template(str):
    """Text meant for Jinja (``{{ inventory_dir }}/...``), written as it is."""


if yaml is not None:
    _AnsibleDumper.add_representer(str, _represent_text)
    _AnsibleDumper.add_representer(Template, lambda dumper, text: dumper.represent_str(str(text)))


def ansible_yaml(data, header):
    """``data`` as a YAML file for Ansible, after the comment lines of ``header``."""
    text = yaml.dump(data, Dumper=_AnsibleDumper, default_flow_style=False, sort_keys=False, allow_unicode=True, width=120)
    return "".join("# %s\n" % line if line else "#\n" for line in header.splitlines()) + "---\n" + text


def host_names(configs):
    """Each node's inventory name: its hostname, else (no hostname, or one taken) the node as targeted."""
    names, taken = {}, set()
    for config in configs:
        name = config.hostname if config.hostname and config.hostname not in taken else config.node
        taken.add(name)
        names[config.node] = name
    return names


def inventory_files(plan, talosconfig_endpoints, controlplane_group="controlplane", worker_group="workers"):
    """``{relative path: text}`` of the inventory, group and host variables the cluster role reads for ``plan``."""
    names = host_names(plan.configs)
    groups = {CONTROLPLANE: controlplane_group, WORKER: worker_group}
    children = {}
    for machine_type in (CONTROLPLANE, WORKER):
        hosts = dict((names[config.node], {"ansible_host": config.node})
                     for config in plan.configs if config.machine_type == machine_type)
        children[groups[machine_type]] = {"hosts": hosts}
    inventory = {"all": {"vars": {"talosconfig": Template("{{ inventory_dir }}/talosconfig")}, "children": children}}
    facts = plan.settings.facts()
    variables = {
        "cluster_secrets": Template("{{ inventory_dir }}/secrets.yaml"),
        "cluster_generated_dir": Template("{{ inventory_dir }}"),
        "cluster_kubeconfig": Template("{{ inventory_dir }}/kubeconfig"),
    }
    variables.update(("cluster_%s" % key, value) for key, value in facts.items())
    variables["cluster_talosconfig_endpoints"] = list(talosconfig_endpoints)
    if controlplane_group != "controlplane":
        variables["cluster_controlplane_group"] = controlplane_group
    if worker_group != "workers":
        variables["cluster_worker_group"] = worker_group
    variables["cluster_controlplane_patches"] = plan.group_patches.get(CONTROLPLANE, [])
    variables["cluster_worker_patches"] = plan.group_patches.get(WORKER, [])
    files = {
        "inventory.yml": ansible_yaml(inventory, "The adopted cluster's nodes, grouped by machine type (talos_linux.talos.talos_adopt).\n"
                                                 "Its files live next to this inventory."),
        "group_vars/all.yml": ansible_yaml(variables, (
            "The cluster role's settings that render every node's running config again (talos_linux.talos.talos_adopt):\n"
            "talos_machine_config's rendering of these settings with the group's patches, then the host's\n"
            "(host_vars/), is what each node ran when it was adopted. Change the cluster here.")),
    }
    for config in plan.configs:
        files["host_vars/%s.yml" % names[config.node]] = ansible_yaml(
            {"cluster_host_patches": plan.host_patches[config.node]},
            "What %s runs beyond its group's config (talos_linux.talos.talos_adopt)." % names[config.node])
    return files
