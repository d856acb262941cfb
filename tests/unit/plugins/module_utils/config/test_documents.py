# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The document kinds and fields each Talos release knows, and the one check of a config against a release."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.config import documents
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation as config_generation
from ansible_collections.talos_linux.talos.plugins.module_utils.common import go_yaml
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

# Upstream's registry, release by release (every registry.Register of pkg/machinery/config/types at each tag): some
# kinds of each release's row and how many kinds each release knows. tests/emulator/test_config_validation.py holds the
# whole table against the emulated node's decoder, kind by kind.
ADDED = {
    "v1.9.0": ["v1alpha1", "VolumeConfig", "SideroLinkConfig", "KubeSpanEndpointsConfig", "ExtensionServiceConfig"],
    "v1.10.0": ["UserVolumeConfig", "PCIDriverRebindConfig", "EthernetConfig"],
    "v1.11.0": ["ExistingVolumeConfig", "RawVolumeConfig", "SwapVolumeConfig", "ZswapConfig"],
    "v1.12.0": ["RegistryMirrorConfig", "HostnameConfig", "LinkConfig", "ResolverConfig", "OOMConfig", "WireguardConfig"],
    "v1.13.0": ["ExternalVolumeConfig", "KubeSpanConfig", "VRFConfig", "EnvironmentConfig", "ImageVerificationConfig"],
    "v1.14.0": ["KubeletConfig", "KubeClusterConfig", "DiscoveryServiceConfig", "UnattendedInstallConfig", "ContainerConfig",
                "BGPInstanceConfig", "FilesystemScrubConfig", "KubeTalosAPIAccessConfig", "VethConfig", "RAIDArrayConfig"],
}
COUNTS = {"v1.9.0": 11, "v1.10.0": 14, "v1.11.0": 18, "v1.12.0": 37, "v1.13.0": 45, "v1.14.0": 90}
# The newest patch release of the minor release before each: the release a kind of the next one is refused on.
BEFORE = {"v1.10.0": "v1.9.6", "v1.11.0": "v1.10.9", "v1.12.0": "v1.11.6", "v1.13.0": "v1.12.11", "v1.14.0": "v1.13.9"}


def doc(kind, **fields):
    document = {"apiVersion": "v1alpha1", "kind": kind}
    document.update(fields)
    return document


def root(**sections):
    document = {"version": "v1alpha1", "machine": {"type": "worker"}, "cluster": {}}
    for path, value in sections.items():
        target = document
        keys = path.split("__")
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return document


def refusal(config, version, target="node 10.5.0.2 runs %s"):
    with pytest.raises(TalosConfigError) as raised:
        documents.check_fits(config, version, target % version if "%s" in target else target, node="10.5.0.2")
    return raised.value


def fits(config, version):
    return documents.check_fits(config, version, "node 10.5.0.2 runs %s" % version) is None


class TestRegistry:
    def test_the_registry_is_upstream_s_release_by_release(self):
        for since, kinds in ADDED.items():
            assert [documents.KIND_SINCE[kind] for kind in kinds] == [since] * len(kinds)
        for release, count in COUNTS.items():
            assert len([kind for kind, since in documents.KIND_SINCE.items()
                        if documents.knows((since,), documents._release(release))]) == count

    @pytest.mark.parametrize("since", sorted(BEFORE, key=documents._release))
    def test_each_release_s_kinds_are_refused_before_it_and_known_from_it(self, since):
        for kind in ADDED[since]:
            config = [root(), doc(kind)]
            assert refusal(config, BEFORE[since]).message == (
                "The config's %s document needs Talos %s or newer; node 10.5.0.2 runs %s." % (kind, since, BEFORE[since]))
            assert fits(config, since) and fits(config, "v1.14.1")

    def test_the_kinds_of_v1_9_need_nothing(self):
        config = [root()] + [doc(kind) for kind, since in documents.KIND_SINCE.items() if since == "v1.9.0" and kind != "v1alpha1"]
        assert documents.requirements(config) == [] and fits(config, "v1.9.0")

    def test_a_refusal_names_the_document_the_release_and_the_node(self):
        error = refusal([root(), doc("KubeletConfig", image="ghcr.io/siderolabs/kubelet:v1.37.0")], "v1.13.4")
        assert error.message == "The config's KubeletConfig document needs Talos v1.14.0 or newer; node 10.5.0.2 runs v1.13.4."
        assert error.node == "10.5.0.2"

    def test_a_named_document_is_named_with_its_name(self):
        error = refusal([doc("UserVolumeConfig", name="data", trim={"enabled": True})], "v1.13.4")
        assert error.message.startswith("The config's UserVolumeConfig/data document sets trim, which needs Talos v1.14.0")

    def test_many_refusals_name_the_first_and_count_the_others(self):
        config = [root(), doc("KubeClusterConfig"), doc("KubeletConfig"), doc("HostnameConfig", auto="stable")]
        assert refusal(config, "v1.13.4").message == (
            "The config's KubeClusterConfig document needs Talos v1.14.0 or newer (as does one more of its documents or "
            "fields); node 10.5.0.2 runs v1.13.4.")
        assert "(as do 2 more of its documents and fields)" in refusal(config, "v1.11.6").message

    def test_a_kind_no_release_knows_is_refused(self):
        assert refusal([doc("KubeletConfg")], "v1.14.1").message == (
            "The config's KubeletConfg document is of a kind no Talos release up to v1.14 knows; node 10.5.0.2 runs v1.14.1.")
        assert documents.valid_for([doc("KubeletConfg")]) == {"min": None, "releases": {}}


class TestFields:
    def test_the_v1alpha1_document_with_a_field_of_v1_12_on_a_v1_11_node(self):
        config = [root(machine__install={"disk": "/dev/sda", "grubUseUKICmdline": True})]
        assert refusal(config, "v1.11.6").message == (
            "The config's v1alpha1 document sets machine.install.grubUseUKICmdline, which needs Talos v1.12.0 or newer; "
            "node 10.5.0.2 runs v1.11.6.")
        assert fits(config, "v1.12.0")
        assert fits([root(machine__install={"disk": "/dev/sda"})], "v1.9.0")

    @pytest.mark.parametrize("version,known", [
        ("v1.12.8", False), ("v1.12.9", True), ("v1.12.11", True), ("v1.13.0", False), ("v1.13.3", False),
        ("v1.13.4", True), ("v1.13.9", True), ("v1.14.0", True),
    ])
    def test_a_field_two_patch_releases_added_is_known_per_patch(self, version, known):
        config = [root(), doc("OOMConfig", strictCgroupClassOrdering=True)]
        if known:
            assert fits(config, version)
        else:
            message = refusal(config, version).message
            assert message.startswith("The config's OOMConfig document sets strictCgroupClassOrdering, which needs Talos "
                                      "v1.12.9 or a later v1.12 release, or v1.13.4 or newer; node 10.5.0.2 runs")
        assert fits([root(), doc("OOMConfig")], "v1.12.0")

    @pytest.mark.parametrize("version,known", [("v1.12.3", False), ("v1.12.4", True), ("v1.13.0", True)])
    def test_a_backported_v1alpha1_field(self, version, known):
        config = [root(machine__network__kubespan__filters={"excludeAdvertisedNetworks": ["10.0.0.0/8"]})]
        assert fits(config, version) if known else "excludeAdvertisedNetworks" in refusal(config, version).message

    def test_list_values_of_extra_args_need_v1_13(self):
        config = [root(cluster__apiServer__extraArgs={"feature-gates": ["A=true", "B=true"], "v": "2"})]
        assert refusal(config, "v1.12.11").message == (
            "The config's v1alpha1 document gives cluster.apiServer.extraArgs.feature-gates a list of values, which needs "
            "Talos v1.13.0 or newer; node 10.5.0.2 runs v1.12.11.")
        assert fits(config, "v1.13.0")
        for path in ("machine__kubelet__extraArgs", "cluster__controllerManager__extraArgs", "cluster__proxy__extraArgs",
                     "cluster__scheduler__extraArgs", "cluster__etcd__extraArgs"):
            assert "a list of values" in refusal([root(**{path: {"a": ["b"]}})], "v1.12.0").message
            assert fits([root(**{path: {"a": "b"}})], "v1.9.0")

    @pytest.mark.parametrize("path,kind,since,before", [
        ("uniqueToken", "SideroLinkConfig", "v1.10.0", "v1.9.6"),
        ("encryption", "VolumeConfig", "v1.11.0", "v1.10.9"),
        ("filesystem.projectQuotaSupport", "UserVolumeConfig", "v1.11.0", "v1.10.9"),
        ("wakeOnLan", "EthernetConfig", "v1.12.0", "v1.11.6"),
        ("volumeType", "UserVolumeConfig", "v1.12.0", "v1.11.6"),
        ("mount", "VolumeConfig", "v1.13.0", "v1.12.11"),
        ("mount.secure", "ExistingVolumeConfig", "v1.13.0", "v1.12.11"),
        ("hostDNS", "ResolverConfig", "v1.14.0", "v1.13.9"),
        ("ntp.useNTS", "TimeSyncConfig", "v1.14.0", "v1.13.9"),
        ("ignoreRoutes", "DHCPv4Config", "v1.14.0", "v1.13.9"),
        ("encryption.allowDiscards", "RawVolumeConfig", "v1.14.0", "v1.13.9"),
        ("scrub", "ExistingVolumeConfig", "v1.14.0", "v1.13.9"),
    ])
    def test_fields_added_to_a_kind_each_release(self, path, kind, since, before):
        fields = value = {}
        keys = path.split(".")
        for key in keys[:-1]:
            value = value.setdefault(key, {})
        value[keys[-1]] = True
        config = [doc(kind, **fields)]
        assert "sets %s, which needs Talos %s or newer" % (path, since) in refusal(config, before).message
        assert fits(config, since)

    def test_fields_inside_lists_are_found_at_every_item(self):
        config = [doc("VolumeConfig", name="EPHEMERAL", encryption={"keys": [{"slot": 0}, {"slot": 1, "tpm": {"options": {}}}]})]
        assert "sets encryption.keys[1].tpm.options, which needs Talos v1.12.0" in refusal(config, "v1.11.6").message
        assert fits(config, "v1.12.0")

    def test_a_negative_max_size_needs_v1_13(self):
        config = [doc("UserVolumeConfig", name="data", provisioning={"maxSize": "-10GiB"})]
        assert "sets provisioning.maxSize to a negative size, which needs Talos v1.13.0" in refusal(config, "v1.12.11").message
        assert fits([doc("UserVolumeConfig", name="data", provisioning={"maxSize": "10GiB"})], "v1.10.0")


class TestVersions:
    def test_pre_releases_count_as_their_release(self):
        config = [root(), doc("KubeletConfig")]
        assert fits(config, "v1.14.0-rc.1") and fits(config, "1.14.0-alpha.0")
        assert refusal(config, "v1.13.9-rc.0").message.endswith("runs v1.13.9-rc.0.")

    def test_no_version_or_a_newer_minor_release_is_not_judged(self):
        config = [doc("KubeletConfg"), doc("KubeletConfig")]
        assert fits(config, "main-abcdef") and fits(config, "v1.15.0")

    def test_a_minor_release_bound_refuses_only_what_its_newest_patch_lacks(self):
        oom = [root(), doc("OOMConfig", strictCgroupClassOrdering=True)]
        assert documents.check_fits(oom, (1, 12), "node 10.5.0.2 runs Talos v1.12 or older") is None
        error = refusal([root(), doc("KubeSpanConfig")], (1, 12), "node 10.5.0.2 runs Talos v1.12 or older")
        assert error.message == ("The config's KubeSpanConfig document needs Talos v1.13.0 or newer; "
                                 "node 10.5.0.2 runs Talos v1.12 or older.")


class TestValidFor:
    @pytest.mark.parametrize("config,expected", [
        ([root()], {"min": "v1.9.0", "releases": {"v1.9": "v1.9.0", "v1.10": "v1.10.0", "v1.11": "v1.11.0",
                                                  "v1.12": "v1.12.0", "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}),
        ([root(), doc("HostnameConfig", auto="stable")], {"min": "v1.12.0", "releases": {
            "v1.12": "v1.12.0", "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}),
        ([root(), doc("OOMConfig", strictCgroupClassOrdering=True)], {"min": "v1.12.9", "releases": {
            "v1.12": "v1.12.9", "v1.13": "v1.13.4", "v1.14": "v1.14.0"}}),
        ([root(machine__network__kubespan__filters={"excludeAdvertisedNetworks": []}), doc("ZswapConfig")], {
            "min": "v1.12.4", "releases": {"v1.12": "v1.12.4", "v1.13": "v1.13.0", "v1.14": "v1.14.0"}}),
        ([root(), doc("KubeletConfig"), doc("OOMConfig", strictCgroupClassOrdering=True)], {
            "min": "v1.14.0", "releases": {"v1.14": "v1.14.0"}}),
    ])
    def test_the_first_patch_of_each_minor_release_that_takes_the_config(self, config, expected):
        assert documents.valid_for(config) == expected

    @pytest.mark.parametrize("contract,oldest", [("v1.9", "v1.9.0"), ("v1.10", "v1.9.0"), ("v1.11", "v1.9.0"),
                                                 ("v1.12", "v1.12.0"), ("v1.13", "v1.12.0"), ("v1.14", "v1.14.0")])
    @pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
    def test_every_generated_config_fits_its_contract(self, bundle, contract, oldest, machine_type):
        text = config_generation.generate_machine_config(bundle, machine_type, "prod", "https://cp.example:6443",
                                                         talos_version=contract)
        config = list(go_yaml.load_all(text))
        assert documents.valid_for(config)["min"] == oldest
        assert fits(config, contract + ".0")


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.14")
