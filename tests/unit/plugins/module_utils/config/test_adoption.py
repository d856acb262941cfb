# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Adoption plans of clusters whose configs Talos's own generator made (tests/fixtures/adoption): the settings found
again, patches that render each node's config exactly, the groups' share, one cluster only, and the files."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy
import os

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config import adoption, generation, smallest_patch
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import apply_patches
from ansible_collections.talos_linux.talos.plugins.module_utils.config.running import RunningConfig
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4 + ["fixtures", "adoption"]))


def _read(*path):
    with open(os.path.join(FIXTURES, *path)) as handle:
        return handle.read()


CLUSTERS = dict((cluster["name"], cluster) for cluster in yaml.safe_load(_read("clusters.yaml"))["clusters"])


def running(name, talos_version=None):
    cluster = CLUSTERS[name]
    return [RunningConfig("10.5.0.%d" % (index + 2), _read(name, node["file"]), talos_version or cluster["talos_version"], node["name"])
            for index, node in enumerate(cluster["nodes"])]


@pytest.mark.parametrize("name", ["v1.9-patched", "v1.10", "v1.11", "v1.12-patched", "v1.13", "v1.14-patched"])
def test_the_generators_inputs_are_found_again_and_the_patches_render_every_config(name):
    cluster, configs = CLUSTERS[name], running(name)
    plan = adoption.plan_adoption(configs)
    assert plan.settings.facts() == {
        "name": cluster["cluster_name"], "endpoint": cluster["endpoint"], "talos_version": cluster["contract"],
        "kubernetes_version": cluster["kubernetes_version"], "install_disk": cluster["install_disk"],
        "install_image": cluster["install_image"], "install_home": "unattended" if cluster["contract"] == "v1.14" else "machine",
        "additional_sans": cluster["additional_sans"]}
    assert plan.mismatches == {}
    for config in configs:
        rendered = list(go_yaml.load_all(plan.rendered[config.machine_type]))
        assert apply_patches(rendered, plan.patches_for(config)) == config.documents, config.hostname
    # The bundle is the control plane's: it renders the same keys.
    fixture_bundle = SecretsBundle.load(os.path.join(FIXTURES, cluster["bundle"]))
    assert plan.bundle.os_ca.crt_pem == fixture_bundle.os_ca.crt_pem
    assert (plan.bundle.cluster_id, plan.bundle.trustd_token, plan.bundle.secretbox_secret) == (
        fixture_bundle.cluster_id, fixture_bundle.trustd_token, fixture_bundle.secretbox_secret)


def test_unpatched_clusters_need_no_patch():
    for name in ("v1.11", "v1.13"):
        plan = adoption.plan_adoption(running(name))
        assert plan.group_patches == {} and all(patches == [] for patches in plan.host_patches.values())
    # talosctl's documentation comments come with an empty `registries: {}` (before v1.12): a node compares text.
    plan = adoption.plan_adoption(running("v1.10"))
    assert plan.group_patches == {} and all(patches == [{"machine": {"registries": {}}}] for patches in plan.host_patches.values())


def test_what_a_group_shares_goes_to_the_group_and_the_rest_to_each_host():
    plan = adoption.plan_adoption(running("v1.14-patched"))
    kubelet = {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "extraArgs": {"rotate-server-certificates": "true"}}
    assert plan.group_patches["controlplane"] == [kubelet, {"apiVersion": "v1alpha1", "kind": "KubeFlannelCNIConfig", "$patch": "delete"},
                                                  plan.group_patches["worker"][1]]
    assert [patch["kind"] for patch in plan.group_patches["worker"]] == ["KubeletConfig", "ExtensionServiceConfig", "UserVolumeConfig"]
    assert plan.host_patches["10.5.0.2"] == [{"apiVersion": "v1alpha1", "kind": "LinkConfig", "name": "eth0",
                                              "addresses": [{"address": "10.5.0.2/24"}], "routes": [{"gateway": "10.5.0.1"}]}]
    legacy = adoption.plan_adoption(running("v1.9-patched"))
    assert legacy.group_patches["worker"][0] == {"machine": {
        "kubelet": {"extraArgs": {"rotate-server-certificates": "true"}},
        "disks": [{"device": "/dev/sdb", "partitions": [{"mountpoint": "/var/mnt/data"}]}]}}
    assert legacy.host_patches["10.5.0.4"] == [{"machine": {"network": {"hostname": "worker-1", "interfaces": [
        {"interface": "eth0", "addresses": ["10.5.0.10/24"], "routes": [{"network": "0.0.0.0/0", "gateway": "10.5.0.1"}]}]}}}]


def test_a_lone_node_of_its_machine_type_keeps_its_patches_to_itself():
    configs = running("v1.14-patched")[:3]
    plan = adoption.plan_adoption(configs)
    assert "worker" not in plan.group_patches
    assert [patch["kind"] for patch in plan.host_patches["10.5.0.4"]] == [
        "KubeletConfig", "ExtensionServiceConfig", "UserVolumeConfig", "LinkConfig"]


def test_the_contract_is_never_newer_than_the_oldest_node():
    # The v1.13 cluster's nodes on v1.14: the v1.13 contract still renders their configs with no patch.
    configs = running("v1.13", "v1.14.1")
    assert adoption.plan_adoption(configs).settings.talos_version == "v1.13"
    # v1.9 to v1.11 render alike: the newest contract the nodes run is chosen.
    assert adoption.plan_adoption(running("v1.11", "v1.14.0")).settings.talos_version == "v1.11"
    assert adoption.plan_adoption(running("v1.9-patched", "v1.10.3")).settings.talos_version == "v1.10"
    mixed = running("v1.11")
    mixed[1].talos_version = "v1.9.2"
    assert adoption.plan_adoption(mixed).settings.talos_version == "v1.9"
    # A development build says nothing about its version.
    assert adoption.plan_adoption(running("v1.11", "v1.14.0-dirty+abc")).settings.talos_version == "v1.11"
    with pytest.raises(TalosConfigError, match=r"^The nodes run Talos v1\.8, older than every version the collection "
                                               r"supports \(v1\.9\): upgrade them first\.$"):
        adoption.plan_adoption(running("v1.11", "v1.8.4"))


def test_control_planes_of_two_clusters_are_refused_in_one_sentence():
    with pytest.raises(TalosConfigError) as refused:
        adoption.plan_adoption(running("v1.14-two-clusters"))
    assert str(refused.value.message) == (
        "The control planes disagree: node 10.5.0.2 and node 10.5.0.3 have different cluster IDs, Kubernetes CAs and "
        "etcd CAs, so they are not one cluster and no one secrets bundle renders both; adopt each cluster with its own nodes.")


def test_a_worker_of_another_cluster_is_refused():
    configs = running("v1.11")
    other = running("v1.14-two-clusters")[1]
    documents = list(other.documents)
    documents[0]["machine"]["type"] = "worker"
    configs[1] = RunningConfig("10.5.0.9", go_yaml.dump_documents(documents), "v1.14.1", "stray")
    with pytest.raises(TalosConfigError, match=r"^The nodes disagree: node 10\.5\.0\.2 and node 10\.5\.0\.9 have different "
                                               r"cluster IDs, so they are not one cluster"):
        adoption.plan_adoption(configs)


def test_a_bundle_of_another_cluster_is_refused_and_the_clusters_own_is_kept():
    other = SecretsBundle.load(os.path.join(FIXTURES, "other-cluster.yaml"))
    with pytest.raises(TalosConfigError, match=r"^/srv/prod/secrets\.yaml is the secrets bundle of another cluster"):
        adoption.plan_adoption(running("v1.11"), other, "/srv/prod/secrets.yaml")
    own = SecretsBundle.load(os.path.join(FIXTURES, "secrets.yaml"))
    assert adoption.plan_adoption(running("v1.11"), own).bundle is own


def test_a_cluster_without_a_control_plane_cannot_give_its_bundle():
    with pytest.raises(TalosConfigError, match="None of the nodes is a control plane"):
        adoption.plan_adoption(running("v1.11")[1:])


def test_a_node_without_configuration_is_refused():
    with pytest.raises(TalosConfigError, match=r"^The running machine config of node 10\.5\.0\.2 holds no v1alpha1 document"):
        RunningConfig("10.5.0.2", "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n")


def test_the_install_home_and_sans_are_chosen_by_the_smallest_patches():
    bundle = SecretsBundle.load(os.path.join(FIXTURES, "secrets.yaml"))
    text = generation.generate_machine_config(bundle, "controlplane", "homes", "https://homes.example:6443", talos_version="v1.14",
                                              install_home="machine", install_disk="/dev/vda", additional_sans=["api.example"])
    plan = adoption.plan_adoption([RunningConfig("10.5.0.2", text, "v1.14.1", "cp-1")])
    facts = plan.settings.facts()
    assert (facts["install_home"], facts["install_disk"], facts["additional_sans"]) == ("machine", "/dev/vda", ["api.example"])
    assert plan.host_patches["10.5.0.2"] == [] and plan.rendered["controlplane"] == text


def test_a_value_no_patch_can_set_is_reported():
    configs = running("v1.11")
    documents = copy.deepcopy(configs[1].documents)
    documents[0]["machine"]["network"] = None
    configs[1] = RunningConfig("10.5.0.3", go_yaml.dump_documents(documents), "v1.11.5", "worker-1")
    assert adoption.plan_adoption(configs).mismatches == {"10.5.0.3": ["v1alpha1.machine.network"]}


def test_the_files_are_the_guides_layout_and_keep_jinja_out_of_the_configs():
    configs = running("v1.9-patched")
    documents = copy.deepcopy(configs[2].documents)
    documents[0]["machine"]["files"] = [{"path": "/var/etc/app.tmpl", "op": "create", "permissions": 420,
                                         "content": "name: {{ .Values.name }}\n{% raw %}\n"}]
    configs[2] = RunningConfig("10.5.0.4", go_yaml.dump_documents(documents), "v1.9.5", "worker-1")
    plan = adoption.plan_adoption(configs)
    files = adoption.inventory_files(plan, ["10.5.0.2:50000"], worker_group="talos_workers")
    assert sorted(files) == ["group_vars/all.yml", "host_vars/controlplane-1.yml", "host_vars/controlplane-2.yml",
                             "host_vars/worker-1.yml", "host_vars/worker-2.yml", "inventory.yml"]
    inventory = yaml.safe_load(files["inventory.yml"])
    assert inventory == {"all": {"vars": {"talosconfig": "{{ inventory_dir }}/talosconfig"}, "children": {
        "controlplane": {"hosts": {"controlplane-1": {"ansible_host": "10.5.0.2"}, "controlplane-2": {"ansible_host": "10.5.0.3"}}},
        "talos_workers": {"hosts": {"worker-1": {"ansible_host": "10.5.0.4"}, "worker-2": {"ansible_host": "10.5.0.5"}}}}}}
    settings = yaml.safe_load(files["group_vars/all.yml"])
    assert settings["cluster_worker_group"] == "talos_workers" and "cluster_controlplane_group" not in settings
    assert settings["cluster_secrets"] == "{{ inventory_dir }}/secrets.yaml"
    assert settings["cluster_talosconfig_endpoints"] == ["10.5.0.2:50000"]
    assert settings["cluster_controlplane_patches"] == plan.group_patches["controlplane"]
    # The template-like text is !unsafe for Ansible, and the value itself for any YAML reader that ignores the tag.
    host = files["host_vars/worker-1.yml"]
    assert "!unsafe" in host and "{{ inventory_dir }}" not in host
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!unsafe", lambda load, node: load.construct_scalar(node))
    patches = yaml.load(host, Loader=loader)["cluster_host_patches"]
    assert patches[0]["machine"]["files"][0]["content"] == "name: {{ .Values.name }}\n{% raw %}\n"


def test_hosts_are_named_by_hostname_and_by_address_when_it_is_missing_or_taken():
    configs = running("v1.9-patched")
    configs[1].hostname = configs[0].hostname
    configs[3].hostname = None
    assert adoption.host_names(configs) == {"10.5.0.2": "controlplane-1", "10.5.0.3": "10.5.0.3", "10.5.0.4": "worker-1",
                                            "10.5.0.5": "10.5.0.5"}


def test_every_patch_is_smaller_than_the_config_it_reproduces():
    # The point of the smallest patch: a node whose config is the rendering plus its patches carries nothing else.
    plan = adoption.plan_adoption(running("v1.14-patched"))
    for config in plan.configs:
        assert smallest_patch.patch_size(plan.patches_for(config)) < 20
